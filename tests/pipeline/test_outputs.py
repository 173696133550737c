"""The recorder and the freshness check, on a throwaway snippet."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tools import outputs
from tools.record_snippets import describe_device, record, run_snippet


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Point tools.outputs at a temporary project with one snippet."""
    monkeypatch.setattr(outputs, "ROOT", tmp_path)
    monkeypatch.setattr(outputs, "SNIPPETS_DIR", tmp_path / "snippets")
    monkeypatch.setattr(outputs, "GENERATED_DIR", tmp_path / "docs" / "generated")
    path = tmp_path / "snippets" / "demo" / "hello.py"
    path.parent.mkdir(parents=True)
    path.write_text('print("hello")\nopen("table.md", "w").write("| a |\\n|---|\\n| 1 |\\n")\n')
    return outputs.Snippet(path)


def test_record_keeps_stdout_files_and_provenance(sandbox, tmp_path):
    result = run_snippet(sandbox, tmp_path / "work")
    assert result.ok, result.stderr
    record(sandbox, result, describe_device())
    out = tmp_path / "docs" / "generated" / "demo" / "hello"
    assert (out / "stdout.txt").read_text() == "hello\n"
    assert (out / "table.md").read_text().startswith("| a |")
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["source_sha256"] == sandbox.source_sha256
    assert prov["files"] == ["table.md"]
    assert {"device", "torch", "triton", "date", "gpu"} <= prov.keys()
    assert sandbox.check_fresh() == prov


def test_changed_source_is_reported_with_the_refresh_command(sandbox, tmp_path):
    record(sandbox, run_snippet(sandbox, tmp_path / "work"), describe_device())
    sandbox.path.write_text('print("changed")\n')
    stale = r"snippets/demo/hello\.py changed.*nox -s snippets -- demo/hello"
    with pytest.raises(outputs.StaleOutputError, match=stale):
        sandbox.check_fresh()


def test_never_recorded_is_reported(sandbox):
    with pytest.raises(outputs.StaleOutputError, match="has no recorded outputs"):
        sandbox.check_fresh()


def test_gpu_only_snippets_point_at_publish(sandbox):
    sandbox.path.write_text('"""Doc."""\n# flashdoc: gpu-only\nprint(1)\n')
    assert sandbox.gpu_only
    assert "nox -s publish" in sandbox.refresh_command


def test_unknown_snippet_lists_the_known_ones(sandbox):
    with pytest.raises(FileNotFoundError, match="known snippets: demo/hello"):
        outputs.snippet("demo/nope")


# a snippet that runs past a short time limit and writes its partial results on Ctrl-C, as the benchmark does
WAITS_FOR_CTRL_C = (
    "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('wrote partial results')\n"
)


def test_time_limit_interrupts_like_ctrl_c(sandbox, tmp_path):
    sandbox.path.write_text(WAITS_FOR_CTRL_C)
    result = run_snippet(sandbox, tmp_path / "work", timeout=2)
    assert result.interrupted and result.ok and result.stdout == "wrote partial results\n"
    assert result.seconds < 30


@pytest.mark.skipif(os.name != "posix", reason="SIGINT dispositions are POSIX")
def test_time_limit_interrupts_when_ctrl_c_is_ignored_here(sandbox, tmp_path):
    """Run in a shell's background job (or under nohup), the runner starts with Ctrl-C ignored; the snippet must
    still get it at the time limit."""
    sandbox.path.write_text(WAITS_FOR_CTRL_C)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = run_snippet(sandbox, tmp_path / "work", timeout=2)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert result.interrupted and result.ok and result.stdout == "wrote partial results\n"
    assert result.seconds < 30


def test_recorded_file_checks_freshness_and_names_what_was_recorded(sandbox, tmp_path):
    record(sandbox, run_snippet(sandbox, tmp_path / "work"), describe_device())
    assert sandbox.recorded_file("table.md") == sandbox.output_dir / "table.md"
    assert sandbox.recorded_file("stdout.txt").read_text() == "hello\n"
    with pytest.raises(FileNotFoundError, match=r"recorded no file 'plot.png'; it recorded: table.md"):
        sandbox.recorded_file("plot.png")
    sandbox.path.write_text('print("changed")\n')
    with pytest.raises(outputs.StaleOutputError):
        sandbox.recorded_file("table.md")


def test_check_lists_outputs_of_a_run_stopped_at_its_time_limit(sandbox, tmp_path, capsys):
    """A run stopped at the time limit may write what it has on its way out, and that is recorded; ``--check``
    lists it as partial (exit 1) until a run that finishes replaces it."""
    from tools.record_snippets import check, partial_snippets

    sandbox.path.write_text(WAITS_FOR_CTRL_C)
    record(sandbox, run_snippet(sandbox, tmp_path / "work", timeout=2), describe_device())
    assert [snip.name for snip, _ in partial_snippets()] == ["demo/hello"]  # what --stale records again
    assert check([]) == 1
    assert "partial: demo/hello: its run stopped at the time limit" in capsys.readouterr().out
    sandbox.path.write_text('print("done")\n')
    record(sandbox, run_snippet(sandbox, tmp_path / "again"), describe_device())
    assert check([]) == 0
    assert "every recorded output is fresh" in capsys.readouterr().out


def test_archive_holds_what_was_recorded_before_a_run_is_stopped(sandbox, tmp_path, monkeypatch):
    """``--archive`` packs the outputs recorded so far after every snippet, named from the repository's root: a
    snippet that fails adds nothing, and a run stopped from outside leaves an archive of what came before."""
    import tarfile

    from tools import record_snippets

    sandbox.path.with_name("broken.py").write_text('raise SystemExit("no GPU here")\n')
    sandbox.path.with_name("stopped.py").write_text("print(1)\n")
    run = record_snippets.run_snippet

    def stopped_at_the_third(snip, *args, **kwargs):
        if snip.name == "demo/stopped":
            raise KeyboardInterrupt  # as a batch job's time limit stops the whole run
        return run(snip, *args, **kwargs)

    monkeypatch.setattr(record_snippets, "run_snippet", stopped_at_the_third)
    archive = tmp_path / "outputs.tar.gz"
    with pytest.raises(KeyboardInterrupt):
        record_snippets.main(["demo/hello", "demo/broken", "demo/stopped", "--archive", str(archive)])
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == [
            f"docs/generated/demo/hello{name}" for name in ("", "/provenance.json", "/stdout.txt", "/table.md")
        ]
        assert tar.extractfile("docs/generated/demo/hello/stdout.txt").read() == b"hello\n"
        provenance = json.loads(tar.extractfile("docs/generated/demo/hello/provenance.json").read())
    assert provenance["source_sha256"] == sandbox.source_sha256
    assert not archive.with_name("outputs.tar.gz.part").exists()


def test_archive_in_a_missing_folder_is_refused_before_anything_runs(sandbox, tmp_path, capsys):
    from tools.record_snippets import main

    with pytest.raises(SystemExit) as stopped:
        main(["demo/hello", "--archive", str(tmp_path / "nowhere" / "out.tar.gz")])
    assert stopped.value.code == 2
    assert f"--archive: the folder {tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err
    assert not sandbox.output_dir.exists()


def test_gpu_recordings_are_batched_into_ten_minute_calls():
    """Stale GPU-only outputs are listed as recording commands whose snippets' last recorded times fit one call:
    longest first, each into the first command with room; a snippet never recorded on a GPU gets one alone."""
    from tools.record_snippets import GPU_BATCH_SECONDS, gpu_batches, gpu_commands

    class Recorded:
        def __init__(self, name, seconds, gpu=True):
            self.name, self._prov = name, None if seconds is None else {"seconds": seconds, "gpu": gpu}

        def provenance(self):
            return self._prov

    snippets = [Recorded(name, s) for name, s in [("a", 470), ("b", 135), ("c", 126), ("d", 26), ("e", 300)]]
    batches = gpu_batches(snippets, budget=510)
    assert batches == [(["a", "d"], 496), (["e", "b"], 435), (["c"], 126)]
    assert all(total <= 510 for _, total in batches)
    assert gpu_batches([Recorded("new", None), Recorded("cpu", 5, gpu=False), Recorded("x", 20)]) == [
        (["new"], GPU_BATCH_SECONDS),
        (["cpu"], GPU_BATCH_SECONDS),
        (["x"], 20),
    ]
    assert gpu_commands(snippets)[0].startswith("python3 -m tools.record_snippets --require-gpu --time-limit 540 a ")
