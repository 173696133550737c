"""What a code block's copy button copies: a complete program, even when the page shows one section.

A page shows the lines that matter (``{{ code("topic/name", section="part") }}``); a reader who copies them
gets those lines plus everything before them in the file that they need (imports, tensors defined earlier):
the file from its top to the end of the section, cut after a whole top-level statement, so that the copy runs
as ``python file.py`` does up to that point. The ``code()`` macro puts this text in a ``data-copy``
attribute around the block, which mkdocs-material's copy button copies instead of the block's own text.

    python -m tools.programs                # run every block's copy text that a CPU can run, from a built site
    python -m tools.programs --gpu-only     # only the GPU-only snippets' blocks (on a CUDA GPU)
    python -m tools.programs --gpu-only triton/benchmark      # only the blocks of the snippets named

Without ``--site``, the blocks are read from the pages' ``code()`` calls instead of a built site (a GPU box
has no mkdocs).
"""

from __future__ import annotations

import argparse
import ast
import html.parser
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tools.outputs import DOCS_DIR, Snippet, snippet

MARKER = re.compile(r"^\s*# --8<-- \[(start|end):(?P<name>[\w-]+)\]\s*$")


def section_end(source: str, section: str) -> int:
    """Number of lines from the top of the file through the last line of ``section``'s top-level statement."""
    lines = source.splitlines()
    ends = [
        i for i, line in enumerate(lines, 1) if (m := MARKER.match(line)) and m[1] == "end" and m["name"] == section
    ]
    if not ends:
        names = sorted({m["name"] for line in lines if (m := MARKER.match(line))})
        raise ValueError(f"no section {section!r}; the file marks: {', '.join(names) or 'none'}")
    end = ends[-1]
    for node in ast.parse(source).body:  # a section that ends inside a def or a loop: take the whole statement
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        if first <= end <= node.end_lineno:
            return node.end_lineno
    return end


def copy_program(snip: Snippet, section: str | None = None) -> str:
    """The text the copy button of this block copies: a complete program, without section markers."""
    source = snip.source
    lines = source.splitlines()
    if section is not None:
        lines = lines[: section_end(source, section)]
    return "\n".join(line for line in lines if not MARKER.match(line)).rstrip() + "\n"


@dataclass(frozen=True)
class Block:
    """One code block on the site: which page shows it, from which snippet and section, and its copy text."""

    page: str
    snippet: str
    section: str | None
    text: str

    @property
    def gpu_only(self) -> bool:
        return snippet(self.snippet).gpu_only


CODE_CALL = re.compile(r"""\{\{-?\s*code\(\s*["'](?P<name>[\w/.-]+)["'](?P<rest>[^)]*)\)""")
SECTION_ARG = re.compile(r"""section\s*=\s*["'](?P<section>[\w-]+)["']""")


def blocks_from_pages(docs_dir: Path = DOCS_DIR) -> list[Block]:
    """Every ``code()`` call in the pages' markdown, with the copy text the macro gives it."""
    blocks = []
    for page in sorted(docs_dir.rglob("*.md")):
        if "generated" in page.relative_to(docs_dir).parts:
            continue
        for m in CODE_CALL.finditer(page.read_text(encoding="utf-8")):
            section = SECTION_ARG.search(m["rest"])
            section = section["section"] if section else None
            snip = snippet(m["name"])
            blocks.append(Block(page.relative_to(docs_dir).as_posix(), snip.name, section, copy_program(snip, section)))
    return blocks


class _CopyBlocks(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[dict[str, str]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "data-copy" in attrs and "data-snippet" in attrs:
            self.found.append(attrs)


def blocks_from_site(site_dir: Path) -> list[Block]:
    """Every block with a copy text in a built site (the ``data-copy`` attributes the ``code()`` macro wrote)."""
    blocks = []
    for page in sorted(site_dir.rglob("*.html")):
        parser = _CopyBlocks()
        parser.feed(page.read_text(encoding="utf-8"))
        for attrs in parser.found:
            blocks.append(
                Block(
                    page.relative_to(site_dir).as_posix(),
                    attrs["data-snippet"],
                    attrs.get("data-section") or None,
                    attrs["data-copy"],
                )
            )
    return blocks


@dataclass
class Outcome:
    text: str
    returncode: int
    output: str
    seconds: float


def run_program(text: str, timeout: float = 600) -> Outcome:
    """Run a copied program as a reader would: saved to a file in an empty folder, ``python program.py``."""
    from tools.record_snippets import snippet_env

    with tempfile.TemporaryDirectory(prefix="flashdoc-copy-") as tmp:
        (Path(tmp) / "program.py").write_text(text, encoding="utf-8")
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "program.py"],
                cwd=tmp,
                env=snippet_env(),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            code, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as err:
            code, output = -1, f"timed out after {timeout:.0f} s\n{err.stdout or ''}{err.stderr or ''}"
    return Outcome(text, code, output, time.perf_counter() - start)


def run_distinct(texts, workers: int = 2, timeout: float = 600) -> dict[str, Outcome]:
    """Run each distinct program once, ``workers`` at a time; {text: outcome}."""
    distinct = list(dict.fromkeys(texts))
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(distinct, pool.map(lambda t: run_program(t, timeout), distinct)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="only blocks of these snippets ('topic/name'; default: all)")
    parser.add_argument("--exclude", nargs="*", default=[], help="leave out blocks of these snippets")
    parser.add_argument("--site", type=Path, help="a built site to read the blocks from (default: the pages)")
    parser.add_argument("--gpu-only", action="store_true", help="only blocks of GPU-only snippets")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    blocks = blocks_from_site(args.site) if args.site else blocks_from_pages()
    blocks = [
        b
        for b in blocks
        if b.gpu_only == args.gpu_only and b.snippet not in args.exclude and (not args.names or b.snippet in args.names)
    ]
    outcomes = run_distinct([b.text for b in blocks], workers=args.workers)
    failed = 0
    for b in blocks:
        o = outcomes[b.text]
        label = f"{b.snippet}" + (f" [{b.section}]" if b.section else "")
        print(f"{'ok  ' if o.returncode == 0 else 'FAIL'} {o.seconds:6.1f} s  {b.page}: {label}")
        if o.returncode != 0:
            failed += 1
            print("\n".join("      " + line for line in o.output.strip().splitlines()[-15:]))
    print(f"{len(blocks) - failed} passed, {failed} failed ({len(outcomes)} distinct programs)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
