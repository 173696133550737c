"""Where ``snippets/triton/benchmark.py`` finds ``run_benchmark``: the benchmark lives in ``benchmarks/`` at the
repository's root, outside the installed package.

Only that snippet imports this name, and its recorded GPU outputs pin its source, import line included. Delete
this file when the snippet is next recorded on a GPU, with its import changed to ``benchmarks.run``.
"""

try:
    from benchmarks.run import run_benchmark
except ModuleNotFoundError as e:  # an installed flashdoc, outside a checkout
    raise ModuleNotFoundError(
        "flashdoc's benchmark is not part of the installed package: run it from a checkout of the repository "
        "(python -m benchmarks.run)"
    ) from e

__all__ = ["run_benchmark"]
