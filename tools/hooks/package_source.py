"""mkdocs hook: a listing of the package's own source links to that file in the repository.

Pages show kernel code straight from the package (a fenced block containing
``--8<-- "flashdoc/kernels/forward.py:fwd_inner"``). Such a listing is part of a module, not a program a
reader can copy and run, so instead of a copy-and-run program (what ``code()`` blocks get) it gets a line under
it linking to the lines it shows, in the repository (``repo_url``) at the commit the site was built from, and
is wrapped in ``div.fd-package-source`` so that tests can tell it from a snippet.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LISTING = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[^\n]*\n"
    r'(?P=indent)--8<-- "(?P<path>flashdoc/[^":]+)(?::(?P<section>[\w-]+))?"[ \t]*\n'
    r"(?P=indent)(?P=fence)[ \t]*$",
    re.M,
)
_ref: dict[str, str] = {}


def commit() -> str:
    """The commit the site is built from (so line links stay right), or 'main' outside a git checkout."""
    if "ref" not in _ref:
        try:
            proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
            _ref["ref"] = proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "main"
        except OSError:
            _ref["ref"] = "main"
    return _ref["ref"]


def line_range(path: str, section: str | None) -> tuple[int, int] | None:
    """First and last line of a section (between its markers), or None for the whole file."""
    if section is None:
        return None
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines, 1) if line.strip() == f"# --8<-- [start:{section}]")
    end = next(i for i, line in enumerate(lines, 1) if i > start and line.strip() == f"# --8<-- [end:{section}]")
    return start + 1, end - 1


def _wrap(match: re.Match, repo_url: str) -> str:
    indent, path = match["indent"], match["path"]
    if not (ROOT / path).is_file():
        return match[0]  # pymdownx.snippets reports the missing file
    lines = line_range(path, match["section"])
    url = f"{repo_url.rstrip('/')}/blob/{commit()}/{path}"
    where = f"lines {lines[0]}–{lines[1]} of " if lines else ""
    if lines:
        url += f"#L{lines[0]}-L{lines[1]}"
    caption = f'<p class="snippet-source">Part of the package: {where}<a href="{url}">{path}</a> in the repository.</p>'
    return (
        f'{indent}<div class="fd-package-source" data-source="{path}" markdown>\n\n{match[0]}\n\n'
        f"{indent}</div>\n{indent}{caption}"
    )


def on_page_markdown(markdown, page, config, files):
    return LISTING.sub(lambda m: _wrap(m, config["repo_url"]), markdown)
