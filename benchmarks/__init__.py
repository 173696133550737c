"""flashdoc's benchmarks: the run against PyTorch's attention kernels, its report, and kernel tools.

Not part of the installed package: run from a checkout (``python -m benchmarks.run``, or ``nox -s bench``).
The protocol is in ``benchmarks/README.md``, what the measurements taught in ``benchmarks/FINDINGS.md``.
"""
