"""Decoding: from a trained model's params to predicted action sequences, and the choice among them.

- `kernel`: the jitted slot pool (`decode_pool` in a `Mode`: the STOP rule or draws keyed by item id,
  forced lengths, teacher forcing).
- `settings`: `DecodeSettings`, a decoding from config.eval and decode.json to the kernel, and its
  compiled decoders; the one check of each of its parts.
- `decode`: passes over BapItems (one pass, K draws decoded together, the greedy pass and its draws)
  and what the settings predict from them.
- `mbr`: the choice among a pass and its draws (select at a cost, vote at a share, "members" of an
  ensemble's pool; one rule per kind of board), plain Python over net action sets.
- `on_val`: a run's decoding chosen on val (STOP rule, then the draws' rules), an ensemble's rules.
- `runs`: decoding over this host's devices: `Evaluator` (a training run's evals), `RunDecoder`
  (a loaded run with its own settings), an ensemble's members.

A trained run's files (decode.json, loading it for decoding) are `bapjax.training.run_eval`.
"""
