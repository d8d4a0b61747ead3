"""Decoding: from a trained model's params to predicted action sequences, and the choice among them.

What the rest of bapjax uses is named here (`tests/test_layering.py` holds every module outside
this package to these names): four classes and the names of the choices' values.

- `DecodeSettings`: a decoding, from config.eval and decode.json to the kernel; the one check of
  each part, for a config (`eval_checks`) and a command's flags (`check_flags`).
- `Evaluator`: a model's params decoded and scored as a training run's evals do; its decoding
  chosen on val (`choose`: what the run writes to decode.json).
- `RunDecoder`: a loaded run with its own settings and compiled decoders; its passes and its own
  choice among them.
- `Ensemble`: several runs' passes pooled per item, the rules per kind of board chosen or fixed.

The modules, each one concept:

- `kernel`: the jitted slot pool (`decode_pool` in a `Mode`: the STOP rule or draws keyed by item id,
  forced lengths, teacher forcing).
- `settings`: `DecodeSettings` and its compiled decoders.
- `decode`: passes over BapItems (one pass, K draws decoded together, the greedy pass and its draws)
  and what the settings predict from them.
- `mbr`: the choice among a pass and its draws (select at a cost, vote at a share, "members" of an
  ensemble's pool; one rule per kind of board), plain Python over net action sets.
- `on_val`: a run's decoding chosen on val (STOP rule, then the draws' rules), an ensemble's rules.
- `runs`: decoding over this host's devices: `Evaluator`, `RunDecoder`, `Ensemble`.

A trained run's files (decode.json, loading it for decoding) are `bapjax.training.run_eval`.
"""

from bapjax.decoding.kernel import SAMPLERS, STOP_RULES
from bapjax.decoding.mbr import BOARDS
from bapjax.decoding.on_val import CHOICE_FIELDS, COSTS, THRESHOLDS
from bapjax.decoding.runs import Ensemble, Evaluator, RunDecoder
from bapjax.decoding.settings import DecodeSettings

__all__ = ["DecodeSettings", "Evaluator", "RunDecoder", "Ensemble",
           "SAMPLERS", "STOP_RULES", "BOARDS", "CHOICE_FIELDS", "COSTS", "THRESHOLDS"]
