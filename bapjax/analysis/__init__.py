"""Commands for a user's own finished runs, each with its usage in its docstring:

* `collect_experiment`: finished runs (and `bapjax.ensemble` folders) -> a results JSON, markdown
  tables and learning curves; the kept MDC test predictions rescored, seed means and differences
  with two-level bootstrap intervals, the NEB subgroups of `error_analysis.breakdown`;
* `error_analysis`: where runs go wrong on an MDC split (reference length, near misses, the first
  action in the Builder's frame, where the build starts), with paired bootstrap intervals;
* `compare_training`: a tiny run trained by another commit's code and by this tree's, its
  parameters compared bit for bit (for refactors);
* `compare_decoding`: trained runs decoded by another commit's `predict` and `ensemble` and by this
  tree's, in each decoding mode and on 1 and 4 CPU devices, the predictions compared byte for byte
  (for refactors);
* `bootstrap` (a helper, no command): bootstrap intervals of micro F1 over items and seeds.
"""
