"""Sessions for flashdoc: tests, lint, transformers, snippets, docs, publish, bench.

    nox -s tests              the whole test suite (Triton interpreter on CPU; GPU tests run when a GPU is there)
    nox -s tests -- kernels   one group of tests: kernels, pipeline, site or benchmarks (tests/<group>/)
    nox -s lint               ruff alone (the rules in pyproject.toml)
    nox -s transformers       the transformers integration's tests on older transformers releases
    nox -s snippets           run every snippet and record its outputs into docs/generated/ (`-- topic/name`)
    nox -s docs               build the site into site/ (strict); `nox -s docs -- serve` serves it with live reload
    nox -s publish            record whatever is stale, refuse anything still stale, then build the site
    nox -s bench              the benchmarks (GPU): against PyTorch's attention kernels, then the variants,
                              decoding, varlen and transformers-step ones, into bench-results/ (`-- --quick`:
                              a smoke subset of each)

tests, snippets, docs and publish share one environment, .nox/flashdoc (torch, Triton, the test and docs
extras: about 2.7 GB), made by the first of them and reused by the others until pyproject.toml changes.

On a machine whose Python environment is already prepared (a GPU machine with torch and Triton but no package
index, say), run a session in place with `nox --no-venv -s <session>`: installs are skipped. Paths into the
environments are POSIX ones (`bin/`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "venv"

# The folders of tests/: `nox -s tests -- kernels` runs tests/kernels only.
TEST_GROUPS = ("kernels", "pipeline", "site", "benchmarks")
ROOT = Path(__file__).resolve().parent
# One environment for every session that needs flashdoc with its test and docs extras (a session-per-env
# layout built three identical 2.7 GB environments).
SHARED_ENV = ROOT / ".nox" / "flashdoc"
SHARED_EXTRAS = "test,docs"
# `nox --no-venv`: run in the Python that runs nox, installing nothing (the sharing sessions declare no nox
# environment of their own, so nox cannot tell them apart from in-place runs; its command line can).
IN_PLACE = "--no-venv" in sys.argv or any(
    a in ("--force-venv-backend=none", "-db=none")
    or (a in ("--force-venv-backend", "-db") and sys.argv[i + 1 : i + 2] == ["none"])
    for i, a in enumerate(sys.argv)
)

# Without a CUDA GPU, install this pinned torch first (on Linux PyPI's wheel is the CUDA build, which runs on a
# CPU too; PIP_EXTRA_INDEX_URL set to PyTorch's CPU wheel index gives the small CPU build). Override with
# FLASHDOC_TORCH, e.g. FLASHDOC_TORCH="torch==2.11.0".
CPU_TORCH = os.environ.get("FLASHDOC_TORCH", "torch==2.13.0")
QUIET = {
    "NO_MKDOCS_2_WARNING": "1",  # mkdocs 1.6's long notice about its successor, on every run
    "PIP_ROOT_USER_ACTION": "ignore",  # pip's warning about running as root (CI and containers do)
}


def has_cuda_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and os.system("nvidia-smi -L > /dev/null 2>&1") == 0


def install(session: nox.Session, *extras: str) -> None:
    """Install flashdoc (editable) with the given extras into the session's own environment, unless running in
    place (--no-venv)."""
    if session.venv_backend == "none":
        return
    if not has_cuda_gpu():
        session.install(CPU_TORCH)
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)


def shared_env(session: nox.Session) -> dict[str, str]:
    """The environment variables that run commands in the shared environment, creating or updating it first.

    It is (re)installed when pyproject.toml, the torch pin or the presence of a GPU differ from what it was
    installed for; pip's own progress shows while it downloads.
    """
    if IN_PLACE:
        return dict(QUIET)
    python = SHARED_ENV / "bin" / "python"
    gpu = has_cuda_gpu()
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + f"{CPU_TORCH} gpu={gpu}".encode()).hexdigest()
    stamp = SHARED_ENV / ".flashdoc-installed"
    env = {
        **QUIET,
        "VIRTUAL_ENV": str(SHARED_ENV),
        "PATH": os.pathsep.join([str(python.parent), os.environ.get("PATH", "")]),
    }
    if python.exists() and stamp.is_file() and stamp.read_text().strip() == wanted:
        session.log(f"Reusing the shared environment {SHARED_ENV.relative_to(ROOT)}")
        return env
    if not python.exists():
        session.log(f"Creating the shared environment {SHARED_ENV.relative_to(ROOT)} (once, for every session)")
        session.run(sys.executable, "-m", "venv", str(SHARED_ENV), external=True)
    pip = [str(python), "-m", "pip", "install", "--progress-bar", "on"]
    if not gpu:
        session.run(*pip, CPU_TORCH, env=env, external=True)
    session.run(*pip, "-e", f".[{SHARED_EXTRAS}]", env=env, external=True)
    stamp.write_text(wanted + "\n")
    return env


def tool(name: str) -> str:
    """The shared environment's copy of a program (nox looks programs up on its own PATH, not the session's env),
    or the program on PATH when running in place."""
    return name if IN_PLACE else str(SHARED_ENV / "bin" / name)


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Lint with ruff, then run the test suite (`-- <group>`: one of kernels, pipeline, site, benchmarks).

    Extra arguments go to pytest, e.g. `nox -s tests -- -k snippets -x`; a first argument naming a group runs that
    folder only: `nox -s tests -- kernels -x` runs tests/kernels. The lint uses pyproject.toml's rules."""
    env = shared_env(session)
    if IN_PLACE and shutil.which("ruff") is None:
        session.log("ruff is not installed in this environment: lint skipped")
    else:
        session.run(tool("ruff"), "check", ".", env=env, external=True)
    args = list(session.posargs)
    if args[:1] and args[0] in TEST_GROUPS:
        args[0] = f"tests/{args[0]}"
    session.run(tool("python"), "-m", "pytest", *args, env=env, external=True)


# transformers releases the integration is tested against besides the newest one, which `tests` installs: the oldest
# it supports (4.53 brought AttentionMaskInterface), the last 4.x (its mask functions take cache_position where 5.x
# passes the query length) and a 5.x release older than the newest.
TRANSFORMERS_RELEASES = ("4.53.3", "4.57.6", "5.17.0")


@nox.session(name="transformers")
@nox.parametrize("release", TRANSFORMERS_RELEASES)
def transformers_releases(session: nox.Session, release: str) -> None:
    """The transformers integration's tests on an older transformers release, in an environment of its own.

    The environment holds torch, flashdoc with its test extra, and that release. `nox -s transformers` runs every
    listed release; extra arguments go to pytest."""
    # the release alone, not over the newest one: a downgrade would leave the newest one's own dependencies (the
    # `kernels` package) behind, too new for the older release's huggingface_hub
    install(session, "test")
    if session.venv_backend != "none":
        session.install(f"transformers=={release}")
    session.run("python", "-m", "pytest", "tests/kernels/test_transformers.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check with pyproject.toml's rules, in a small environment of its own (ruff only)."""
    if session.venv_backend != "none":
        session.install("ruff>=0.6", env=QUIET)
    session.run("ruff", "check", ".", *session.posargs)


@nox.session(venv_backend="none")
def snippets(session: nox.Session) -> None:
    """Run snippets and record their outputs into docs/generated/ (`-- topic/name` or `-- --stale`).

    With no arguments every snippet runs; `nox -s snippets -- attention/numpy_attention` runs the ones named, and
    `nox -s snippets -- --stale` only those whose outputs are stale."""
    env = shared_env(session)
    session.run(tool("python"), "-m", "tools.record_snippets", *session.posargs, env=env, external=True)


def build_site(session: nox.Session, env: dict[str, str], *args: str) -> None:
    """mkdocs build --strict into a fresh folder, swapped in for site/ only if the build succeeds: a failed
    build leaves the previous site in place."""
    site = ROOT / "site"
    building = Path(tempfile.mkdtemp(prefix=".site-building-", dir=ROOT))
    try:
        # no --quiet: mkdocs 1.6 counts the warnings that --strict refuses only as they are logged, so a quiet
        # strict build lets every warning through
        session.run(tool("mkdocs"), "build", "--strict", "--site-dir", str(building), *args, env=env, external=True)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        if site.exists():
            session.log("site/ still holds the previous build")
        raise
    old = ROOT / ".site-old"
    shutil.rmtree(old, ignore_errors=True)
    if site.exists():
        site.rename(old)
    building.rename(site)
    shutil.rmtree(old, ignore_errors=True)


@nox.session(venv_backend="none")
def docs(session: nox.Session) -> None:
    """Build the site into site/ with no warnings allowed; `nox -s docs -- serve` serves it with live reload."""
    env = shared_env(session)
    if session.posargs[:1] == ["serve"]:
        # serve watches flashdoc/ and tools/ (mkdocs.yml): no .pyc written there by the build's own imports
        session.run(
            tool("mkdocs"),
            "serve",
            "--strict",
            *session.posargs[1:],
            env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
            external=True,
        )
    else:
        build_site(session, env, *session.posargs)
        session.log(
            "Site built into site/: serve it with `python -m http.server -d site` and open "
            "http://127.0.0.1:8000 (or `nox -s docs -- serve`)"
        )


@nox.session(venv_backend="none")
def publish(session: nox.Session) -> None:
    """Record stale outputs, refuse while any is still stale, then build the site for deployment.

    GPU-only snippets are recorded only on a CUDA GPU; an output stamped as recorded with older code counts as
    stale here. FLASHDOC_SITE_URL and FLASHDOC_REPO_URL set where the site is published (defaults in
    mkdocs.yml)."""
    env = {**shared_env(session), "FLASHDOC_REQUIRE_FRESH": "1"}
    session.run(tool("python"), "-m", "tools.record_snippets", "--stale", env=env, external=True)
    try:
        session.run(tool("python"), "-m", "tools.record_snippets", "--check", env=env, external=True)
    except nox.command.CommandFailed:
        session.error(
            "refusing to publish: the outputs above are stale or partial (GPU-only ones are recorded on a CUDA "
            "GPU: run `nox -s publish` there, or see CONTRIBUTING.md)"
        )
    for name in ("FLASHDOC_SITE_URL", "FLASHDOC_REPO_URL"):
        session.log(f"{name}={os.environ.get(name, '(mkdocs.yml default)')}")
    build_site(session, env)
    session.log("Published build in site/, with flashdoc's wheel, sdist and SHA256SUMS in site/downloads/")


# The benchmarks `nox -s bench` runs after the main one, each into its own folder of bench-results/; `--quick`
# reaches each of them.
BENCH_SUITES = (
    ("variants", "benchmarks.variants"),
    ("decode", "benchmarks.decode"),
    ("varlen", "benchmarks.varlen"),
    ("hf", "benchmarks.hf_step"),
)


@nox.session
def bench(session: nox.Session) -> None:
    """Run the benchmarks into bench-results/ (GPU; `-- --quick` for a smoke subset of each).

    First flashdoc against its peers (extra arguments go to `python -m benchmarks.run`; benchmarks/README.md has
    the protocol), then the suites of BENCH_SUITES (variants, decode, varlen and the transformers training step)
    into bench-results/<suite>/. `--quick` reaches every run."""
    install(session, "bench")
    session.run("python", "-m", "benchmarks.run", "--out", "bench-results", *session.posargs)
    quick = ["--quick"] if "--quick" in session.posargs else []
    for folder, module in BENCH_SUITES:
        session.run("python", "-m", module, "--out", str(Path("bench-results") / folder), *quick)
