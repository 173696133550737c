"""Provenance covers the code a snippet runs: a change to one kernel marks stale exactly the outputs whose
recording imported it, and the docs build says so in one line, naming the command that records them again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tools import outputs
from tools.outputs import ROOT, all_snippets
from tools.record_snippets import describe_device, record, run_snippet
from tools.site_macros.snippets import provenance_html

KERNEL = "flashdoc/kernels/forward.py"
# What the docs build reads: the copy gets these, and a change in one of its kernels.
COPIED = ["flashdoc", "benchmarks", "snippets", "tools", "docs", "overrides", "mkdocs.yml", "pyproject.toml"]


def recorded_modules(snip) -> dict:
    return (snip.provenance() or {}).get("modules", {})


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Point tools.outputs at a temporary project with one snippet that imports a module of the project."""
    monkeypatch.setattr(outputs, "ROOT", tmp_path)
    monkeypatch.setattr(outputs, "SNIPPETS_DIR", tmp_path / "snippets")
    monkeypatch.setattr(outputs, "GENERATED_DIR", tmp_path / "docs" / "generated")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "kernel.py").write_text("def f():\n    return 1\n")
    (tmp_path / "pkg" / "unused.py").write_text("")
    path = tmp_path / "snippets" / "demo" / "uses_kernel.py"
    path.parent.mkdir(parents=True)
    path.write_text("import sys\nsys.path.insert(0, %r)\nfrom pkg.kernel import f\nprint(f())\n" % str(tmp_path))
    return outputs.Snippet(path)


def test_modules_a_run_imports_are_recorded_with_their_hashes(sandbox, tmp_path):
    result = run_snippet(sandbox, tmp_path / "work")
    assert result.ok, result.stderr
    assert {"pkg/__init__.py", "pkg/kernel.py"} <= set(result.modules)
    assert "pkg/unused.py" not in result.modules
    # run_snippet sees the real repository root; record() hashes relative to the sandbox's
    record(sandbox, result, describe_device())
    prov = sandbox.provenance()
    assert prov["format"] == outputs.PROVENANCE_FORMAT
    assert prov["modules"]["pkg/kernel.py"] == outputs.sha256_file(tmp_path / "pkg" / "kernel.py")
    assert sandbox.freshness().fresh


def test_a_changed_module_is_named_and_gpu_only_outputs_are_stamped(sandbox, tmp_path, monkeypatch):
    record(sandbox, run_snippet(sandbox, tmp_path / "work"), describe_device())
    (tmp_path / "pkg" / "kernel.py").write_text("def f():\n    return 2\n")
    state = sandbox.freshness()
    assert not state.fresh and state.changed_modules == ("pkg/kernel.py",) and not state.source_changed
    with pytest.raises(outputs.StaleOutputError, match=r"pkg/kernel\.py.*nox -s snippets -- demo/uses_kernel"):
        sandbox.check_fresh()
    # the same change under a GPU-only snippet: shown, with a stamp naming the module
    sandbox.path.write_text('"""Doc."""\n# flashdoc: gpu-only\n' + sandbox.source)
    record(sandbox, run_snippet(sandbox, tmp_path / "work"), describe_device())
    (tmp_path / "pkg" / "kernel.py").write_text("def f():\n    return 3\n")
    assert sandbox.check_fresh()["snippet"] == sandbox.rel_path
    assert "the package has changed since (pkg/kernel.py)" in sandbox.stamp()
    shown = provenance_html(sandbox, sandbox.provenance())  # on the page: short, with the files in its tooltip
    assert "before one of its files changed" in shown and 'title="changed since: pkg/kernel.py"' in shown
    monkeypatch.setenv("FLASHDOC_REQUIRE_FRESH", "1")  # publishing: no stamps
    with pytest.raises(outputs.StaleOutputError, match="pkg/kernel.py"):
        sandbox.check_fresh()


def test_a_kernel_change_makes_the_docs_build_name_exactly_the_outputs_that_import_it(tmp_path):
    """Plant a change in a kernel function in a copy of the project: `mkdocs build` there stops before rendering
    anything, with one line that names every CPU-recordable output whose recording imported that file and no
    other, and the command that records them."""
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tmp_path / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "assets"))
        else:
            shutil.copy2(src, tmp_path / name)
    kernel = tmp_path / KERNEL
    source = kernel.read_text()
    assert "def _attn_fwd_inner(" in source
    kernel.write_text(source.replace("def _attn_fwd_inner(", "def _attn_fwd_inner(  # planted change\n", 1))

    depends = {s.name for s in all_snippets() if KERNEL in recorded_modules(s)}
    cpu = sorted(s.name for s in all_snippets() if s.name in depends and not s.gpu_only)
    gpu = sorted(s.name for s in all_snippets() if s.name in depends and s.gpu_only)
    assert cpu and gpu, "expected outputs on both sides of the kernel (else this test shows nothing)"
    assert len(depends) < len(all_snippets()), "every output imports the kernel: no 'exactly' to check"

    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env.pop("FLASHDOC_REQUIRE_FRESH", None)
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "out")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log
    lines = [line for line in log.splitlines() if "stale recorded outputs" in line]
    assert len(lines) == 1 and "Traceback" not in log, log
    line = lines[0]
    named = line.split("stale recorded outputs: ", 1)[1].split(" (", 1)[0].split(", ")
    assert sorted(named) == cpu, line  # GPU-only ones are not in the error: they build, stamped
    assert f"({KERNEL} changed)" in line
    assert f"`nox -s snippets -- {' '.join(cpu)}`" in line
    assert not (tmp_path / "out" / "index.html").exists()

    # with the CPU outputs recorded again (here: their provenance brought up to date), the build gets past the
    # check and the GPU-only ones are the ones shown stamped
    for name in cpu:
        path = tmp_path / "docs" / "generated" / name / "provenance.json"
        prov = json.loads(path.read_text())
        prov["modules"][KERNEL] = outputs.sha256_file(kernel)
        path.write_text(json.dumps(prov))
    check = subprocess.run(
        [sys.executable, "-m", "tools.record_snippets", "--check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    stale = sorted(line.split(": ")[1] for line in check.stdout.splitlines() if line.startswith("stale"))
    assert stale == gpu, check.stdout + check.stderr
