"""Flax models for Builder Action Prediction: parts (text encoders, world encoders, action
decoders, heads), the architectures made of them, and `build_model`."""

from bapjax.models.builder import MODELS, BuilderModel, build_model

__all__ = ["MODELS", "BuilderModel", "build_model"]
