"""The project's own laboratory: studies, reproduction checks, figure rendering, benchmarks and the GPU kit.

It sits beside the `hf_jacobi` package in the repository and is not installed by `pip install hf-jacobi`: a user of
the library never imports it. It imports `hf_jacobi` (never the other way round) and runs from the repository's root,
where `python -m lab COMMAND` finds it; the test suite puts the root on `sys.path` (pyproject.toml, `pythonpath`).
"""
