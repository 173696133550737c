"""Runnable cells: a snippet's code block that readers can edit and run in the browser.

    {{ runnable("interactive/pure_python_attention") }}

emits the same code block and download link as ``code()`` (pymdownx.snippets pulls the file in, so a
missing file fails the build), followed by the output recorded by running the file, folded, for comparison;
all inside ``<div class="fd-runnable">``, which ``docs/javascripts/interactive/runnable.js`` turns into a
cell with Run and Reset that runs on Pyodide's core runtime served by the site. Such snippets must be pure
Python (standard library only): the cell refuses, with an explanation, code that imports anything else.
"""

from __future__ import annotations

import html

from tools.outputs import snippet


def register(env):
    @env.macro
    def runnable(name, title=None):
        """An editable, runnable cell for ``snippets/<name>.py`` with its recorded output."""
        snip = snippet(name)
        recorded = snip.recorded_file("stdout.txt").read_text(encoding="utf-8")
        lines = recorded.rstrip("\n").count("\n") + 1
        block = env.macros["code"](name, title=title or f"{snip.rel_path} · runnable")
        recorded_block = env.macros["output"](name, title="Recorded output")
        return (
            f'<div class="fd-runnable" data-filename="{html.escape(snip.rel_path)}" '
            f'data-output-lines="{lines}" markdown="1">\n\n'
            f"{block}\n"
            '<details class="fd-runnable__recorded" markdown="1">\n'
            "<summary>Output recorded by running the file with CPython</summary>\n\n"
            f"{recorded_block}\n"
            "</details>\n\n"
            "</div>\n"
        )
