"""The pipeline contract: snippet -> recorded output -> page.

- every file in snippets/ runs (on CPU with small sizes when there is no GPU);
- every snippet has recorded outputs, produced by its current source;
- no recorded outputs are left over from a snippet that no longer exists;
- no Python is pasted into a page: code blocks come from files through pymdownx.snippets.
"""

from __future__ import annotations

import re

import pytest

from tools.outputs import GENERATED_DIR, ROOT, StaleOutputError, all_snippets
from tools.record_snippets import run_snippet

SNIPPETS = all_snippets()
DOCS_PAGES = sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)[^\n]*\n"
    r"(?P<body>.*?)^(?P=indent)(?P=fence)\s*$",
    re.MULTILINE | re.DOTALL,
)


def ids(snippets):
    return [s.name for s in snippets]


@pytest.mark.timeout(1000)  # past run_snippet's own limit (900 s, then 60 s to stop), which says what ran over
@pytest.mark.parametrize("snip", SNIPPETS, ids=ids(SNIPPETS))
def test_snippet_runs(snip, tmp_path):
    result = run_snippet(snip, tmp_path, timeout=900)
    assert result.ok, f"{snip.rel_path} exited with {result.returncode}:\n{result.stderr[-4000:]}"


@pytest.mark.parametrize("snip", SNIPPETS, ids=ids(SNIPPETS))
def test_recorded_outputs_match_source(snip):
    """Recorded by the snippet and package code in the checkout; a GPU-only output recorded with older package
    code is reported as a skip (its page shows it stamped) until a GPU records it again."""
    try:
        prov = snip.check_fresh()
    except StaleOutputError as err:
        pytest.fail(str(err))
    for name in prov["files"]:
        assert (snip.output_dir / name).is_file(), f"{snip.rel_path}: recorded file {name} is missing"
    if snip.stamp():
        pytest.skip(f"{snip.name} is shown stamped ({snip.stamp()}); record it on a CUDA GPU: {snip.refresh_command}")


def test_no_orphaned_outputs():
    expected = {s.output_dir for s in SNIPPETS}
    recorded = {p.parent for p in GENERATED_DIR.rglob("provenance.json")}
    orphans = sorted(p.relative_to(ROOT).as_posix() for p in recorded - expected)
    assert not orphans, f"outputs of snippets that no longer exist (delete them): {orphans}"


@pytest.mark.parametrize("page", DOCS_PAGES, ids=[p.relative_to(ROOT / "docs").as_posix() for p in DOCS_PAGES])
def test_no_python_pasted_into_pages(page):
    for match in FENCE.finditer(page.read_text(encoding="utf-8")):
        if match["lang"] not in ("python", "py", "python3", "pycon"):
            continue
        lines = [line.strip() for line in match["body"].splitlines() if line.strip()]
        pasted = [line for line in lines if not line.startswith("--8<--")]
        assert not pasted, (
            f"{page.relative_to(ROOT)} has Python pasted into a code block ({pasted[0]!r}); put it in a file under "
            "snippets/ and show it with {{ code(...) }}"
        )


def test_repo_file_links_a_file_at_the_built_commit():
    from tools.hooks.package_source import commit
    from tools.site_macros.snippets import repository_link

    link = repository_link("https://example.org/flashdoc/", "benchmarks/FINDINGS.md")
    assert link == (
        f'<a href="https://example.org/flashdoc/blob/{commit()}/benchmarks/FINDINGS.md">'
        "<code>benchmarks/FINDINGS.md</code></a>"
    )
    with pytest.raises(ValueError, match="repo_file: the repository has no file 'benchmarks/NOTES.md'"):
        repository_link("https://example.org/flashdoc", "benchmarks/NOTES.md")
