"""The names of the text encoders a builder model may read (config.model.text.encoder): the GRU over
vocabulary ids, or a frozen pretrained encoder whose token states the features hold."""

from __future__ import annotations

GRU_TEXT = "gru"  # config.model.text.encoder of the models that read vocabulary ids (GloVe + GRU)
# The frozen encoders a model may read instead (config.model.text.encoder) -> their states' cache name.
TEXT_ENCODERS = {"minilm": "all-MiniLM-L6-v2"}


def text_encoder_features(model_text_encoder: str) -> str:
    """FeatureConfig.text_encoder for a model's text encoder: "" (token ids) for the GRU, else the
    frozen encoder's name; the one check of the name."""
    if model_text_encoder == GRU_TEXT:
        return ""
    if model_text_encoder not in TEXT_ENCODERS:
        raise ValueError(f"config.model.text.encoder must be {GRU_TEXT!r} or one of {sorted(TEXT_ENCODERS)}, "
                         f"got {model_text_encoder!r}")
    return model_text_encoder
