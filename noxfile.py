"""Sessions for flashdoc: tests, snippets, docs, publish, bench.

    nox -s tests              the whole test suite (Triton interpreter on CPU; GPU tests run when a GPU is there)
    nox -s tests -- kernels   one group of tests: kernels, pipeline, site or benchmarks (tests/<group>/)
    nox -s snippets           run every snippet and record its outputs into docs/generated/
    nox -s docs               build the site into site/ (strict); `nox -s docs -- serve` serves it with live reload
    nox -s publish            on a CUDA GPU: record every snippet there, then build the site
    nox -s bench              the benchmark against PyTorch's attention kernels (GPU), into bench-results/

On a machine whose Python environment is already prepared (the H200 box has torch and Triton but no package
registry), run a session in place with `nox --no-venv -s <session>`: installs are skipped.
"""

from __future__ import annotations

import os
import shutil

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "venv"

# The folders of tests/: `nox -s tests -- kernels` runs tests/kernels only.
TEST_GROUPS = ("kernels", "pipeline", "site", "benchmarks")

# Without a CUDA GPU, take PyTorch's CPU build (a few hundred MB) rather than a multi-GB CUDA build.
# Override with FLASHDOC_TORCH, e.g. FLASHDOC_TORCH="torch==2.11.0".
CPU_TORCH = os.environ.get("FLASHDOC_TORCH", "torch==2.13.0")
# mkdocs 1.6 prints a long notice about its successor on every run; it says nothing about this site.
MKDOCS_ENV = {"NO_MKDOCS_2_WARNING": "1"}


def has_cuda_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and os.system("nvidia-smi -L > /dev/null 2>&1") == 0


def install(session: nox.Session, *extras: str) -> None:
    """Install flashdoc (editable) with the given extras, unless running in place (--no-venv)."""
    if session.venv_backend == "none":
        return
    if not has_cuda_gpu():
        session.install(CPU_TORCH)
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)


@nox.session
def tests(session: nox.Session) -> None:
    """Lint with ruff (pyproject.toml's rules), then run the test suite. Extra arguments go to pytest, e.g.
    `nox -s tests -- -k snippets -x`; a first argument naming a group runs that folder only: `nox -s tests --
    kernels -x` runs tests/kernels."""
    install(session, "test", "docs")
    if session.venv_backend == "none" and shutil.which("ruff") is None:
        session.log("ruff is not installed in this environment: lint skipped")  # e.g. the H200 box, in place
    else:
        session.run("ruff", "check", ".")
    args = list(session.posargs)
    if args[:1] and args[0] in TEST_GROUPS:
        args[0] = f"tests/{args[0]}"
    session.run("python", "-m", "pytest", *args)


@nox.session
def snippets(session: nox.Session) -> None:
    """Run every snippet (or those named: `nox -s snippets -- attention/numpy_attention`) and record outputs."""
    install(session, "docs")
    session.run("python", "-m", "tools.record_snippets", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the site into site/ with no warnings allowed; `nox -s docs -- serve` serves it with live reload."""
    install(session, "docs")
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", "--strict", *session.posargs[1:], env=MKDOCS_ENV)
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs, env=MKDOCS_ENV)
        session.log(f"Site built: open {os.path.abspath('site/index.html')}")


@nox.session
def publish(session: nox.Session) -> None:
    """Record every snippet on a CUDA GPU, then build the site: the output that gets deployed."""
    if not has_cuda_gpu():
        session.error(
            "publish needs a CUDA GPU (nvidia-smi finds none here): it records every snippet's outputs, "
            "benchmarks included, on the GPU. Use `nox -s snippets` and `nox -s docs` on this machine."
        )
    install(session, "docs")
    session.run("python", "-m", "tools.record_snippets", "--require-gpu")
    session.run("mkdocs", "build", "--strict", env=MKDOCS_ENV)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmark flashdoc against its peers; extra arguments go to `python -m benchmarks.run` (benchmarks/README.md
    has the protocol), e.g. `nox -s bench -- --quick`."""
    install(session, "bench")
    session.run("python", "-m", "benchmarks.run", "--out", "bench-results", *session.posargs)
