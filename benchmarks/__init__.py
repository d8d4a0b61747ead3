"""Speed measurements the docs quote, each with its command in its docstring.

Run each from the repository root as a module, `python -m benchmarks.<name>`: that imports this
tree's bapjax and the shared helpers as `benchmarks.<module>` (bench_train's `load_config`,
`time_training`, ...). A benchmark that measures another commit runs that tree in its own process
whose working directory and PYTHONPATH are that tree.
"""
