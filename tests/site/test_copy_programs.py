"""Copy means run: every Python block's copy button on the built site copies a complete program, and each
program runs on the CPU (the GPU-only snippets' programs are run on a GPU by tests/pipeline/test_programs.py).

A block shows a snippet's section; its copy button copies that section plus the lines above it that it needs
(``tools/programs.py``). Listings of the package's own source are not programs: they link to the file in the
repository instead. Notebook pages are exempt too: their cells run in order, and the page offers the
notebook's whole source for download.
"""

from __future__ import annotations

import pytest

from tools.outputs import snippet
from tools.programs import blocks_from_site, copy_program, run_distinct

PlaywrightTimeout = pytest.importorskip("playwright.sync_api", reason="needs `pip install playwright`").TimeoutError

# What material's copy button copies (its clipboard code): the data-copy of the nearest element that has one,
# else the text of the block's <code>. Read in the page, per Python block, with what wraps it.
# The API reference's signatures (mkdocstrings' .doc-signature) are the package's own, not programs to copy.
PYTHON_BLOCKS = ".md-typeset div.language-python.highlight:not(.doc-signature)"
BLOCKS_JS = (
    """() => [...document.querySelectorAll('"""
    + PYTHON_BLOCKS
    + """')].map(block => {
    const code = block.querySelector('pre > code');
    const button = block.querySelector('button[data-md-type=copy]');
    const holder = code.closest('[data-copy]');
    return {
      program: block.closest('.fd-program') !== null,
      packageSource: block.closest('.fd-package-source') !== null,
      button: button !== null,
      visible: button !== null && button.checkVisibility(),
      target: button ? button.getAttribute('data-clipboard-target') : null,
      copies: holder ? holder.getAttribute('data-copy') : code.innerText,
      snippet: holder ? holder.getAttribute('data-snippet') : null,
      section: holder ? holder.getAttribute('data-section') : null,
    };
  })"""
)


def content_pages(site):
    return sorted(
        p
        for p in site.rglob("*.html")
        if p.name != "404.html" and not {"snippets", "notebooks", "assets"} & set(p.parts)
    )


def test_every_python_block_copies_a_program_or_links_its_package_file(page, built_site):
    """In Chromium: each Python block's copy button copies the complete program the macro computed, or the block
    is a package listing with a link to its file; one click per page checks the clipboard itself."""
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    programs = listings = 0
    problems = []
    for path in content_pages(built_site):
        rel = path.relative_to(built_site).as_posix()
        page.goto(page.site_url + rel.removesuffix("index.html"), wait_until="networkidle")
        # material adds a block's buttons once the block has been on screen: show each, then wait for them
        page.evaluate(f"document.querySelectorAll('{PYTHON_BLOCKS}').forEach(b => b.scrollIntoView())")
        try:
            page.wait_for_function(
                f"[...document.querySelectorAll('{PYTHON_BLOCKS}')]"
                ".every(b => b.querySelector('button[data-md-type=copy]'))",
                timeout=10_000,
            )
        except PlaywrightTimeout:
            pass  # reported below, block by block
        blocks = page.evaluate(BLOCKS_JS)
        for i, block in enumerate(blocks):
            where = f"{rel} block {i + 1}"
            if not block["button"]:
                problems.append(f"{where}: no copy button")
            elif block["packageSource"]:
                listings += 1
            elif not block["program"]:
                problems.append(f"{where}: a Python block that is neither a snippet's program nor a package listing")
            else:
                programs += 1
                expected = copy_program(snippet(block["snippet"]), block["section"])
                if block["copies"].rstrip() != expected.rstrip():
                    problems.append(f"{where}: copies something other than {block['snippet']}'s program")
        first = next((b for b in blocks if b["program"] and b["visible"]), None)
        if first is not None:  # click one copy button per page and read what reached the clipboard
            button = page.locator(f"button[data-md-type=copy][data-clipboard-target='{first['target']}']")
            button.scroll_into_view_if_needed()
            button.click()
            copied = page.evaluate("navigator.clipboard.readText()")
            if copied.rstrip() != first["copies"].rstrip():
                problems.append(f"{rel}: the clipboard got {copied[:80]!r}, not the block's program")
    assert not problems, "\n".join(problems)
    assert programs >= 20 and listings >= 10, (programs, listings)


def test_every_copied_program_runs_on_the_cpu(built_site):
    """Each block's copy text, saved to a file in an empty folder and run with python, exits 0 (each distinct
    program once, two at a time). GPU-only snippets' blocks are left to the GPU run."""
    blocks = blocks_from_site(built_site)
    cpu = [b for b in blocks if not b.gpu_only]
    assert len(cpu) >= 20, len(cpu)
    outcomes = run_distinct([b.text for b in cpu], workers=2, timeout=600)
    failed = [
        f"{b.page}: {b.snippet} [{b.section}] exited {outcomes[b.text].returncode}:\n{outcomes[b.text].output[-1500:]}"
        for b in cpu
        if outcomes[b.text].returncode != 0
    ]
    assert not failed, "\n\n".join(failed)
