"""Macros that put snippet code and recorded snippet outputs on a page.

    {{ code("attention/numpy_attention") }}                    the whole file, with a link to it
    {{ code("attention/numpy_attention", section="softmax") }} one ``# --8<-- [start:softmax]`` section
    {{ code("attention/transformer", collapsed=True, title="The full block") }}   folded by default
    {{ output("attention/numpy_attention") }}                  what it printed, with provenance
    {{ output("triton/benchmark", "ratios.md") }}              a recorded markdown table
    {{ figure("attention/scaling", "saturation.png", "Caption") }}   a recorded image

The code itself is pulled in by pymdownx.snippets (``check_paths: true``), so a missing file or section
fails the build. Outputs are checked against the snippet's current source: if the snippet changed after its
outputs were recorded, the build fails with the command that refreshes them.
"""

from __future__ import annotations

import html
import posixpath

from tools.outputs import DOCS_DIR, ROOT, Snippet, snippet

IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp")


def provenance_html(snip: Snippet, prov: dict) -> str:
    """One line under every output saying exactly what produced it."""
    sha = prov["source_sha256"][:10]
    text = (
        f"Recorded by running <code>{snip.rel_path}</code> on <strong>{html.escape(prov['device'])}</strong>"
        f" · torch {prov['torch']} · triton {prov['triton']} · {prov['date']} · source sha256 {sha}"
    )
    if prov.get("interrupted_at_time_limit"):
        text += f" · <strong>stopped at its time limit after {prov['seconds']:.0f} s: partial results</strong>"
    return f'<p class="provenance">{text}</p>'


def relative_to_page(page, docs_path: str) -> str:
    """Path from the page's source file to a file under docs/, for links that mkdocs checks."""
    page_dir = posixpath.dirname(page.file.src_uri)
    return posixpath.relpath(docs_path, page_dir or ".")


def site_relative_url(page, site_path: str) -> str:
    """URL of a file copied into the built site (not a docs page), relative to the rendered page."""
    depth = page.url.count("/") if page.url else 0
    return "../" * depth + site_path


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def register(env):
    @env.macro
    def code(name, section=None, title=None, collapsed=False, hl_lines=None):
        """A fenced Python block from ``snippets/<name>.py`` and a link to the whole file."""
        snip = snippet(name)
        target = snip.rel_path + (f":{section}" if section else "")
        options = f'title="{title or snip.rel_path}"'
        if hl_lines:
            options += f' hl_lines="{hl_lines}"'
        block = f'```python {options}\n--8<-- "{target}"\n```'
        url = site_relative_url(env.page, snip.rel_path)
        if section:
            caption = (f'Section <code>{section}</code> of <a href="{url}">{snip.rel_path}</a>; '
                       "it relies on the lines before it in that file, which runs as is.")
        else:
            caption = f'Complete and runnable: <a href="{url}">download {snip.rel_path}</a>.'
        caption_html = f'<p class="snippet-source">{caption}</p>'
        if collapsed:
            return f'??? example "{title or snip.rel_path}"\n\n{_indent(block)}\n\n{_indent(caption_html)}\n'
        return f"{block}\n{caption_html}\n"

    @env.macro
    def output(name, file="stdout.txt", title="Output"):
        """A recorded output of ``snippets/<name>.py``: text in a block, markdown tables inline."""
        snip = snippet(name)
        path = snip.recorded_file(file)
        rel = path.relative_to(ROOT).as_posix()  # pymdownx.snippets resolves paths from the project root
        if file.endswith(".md"):
            body = f'--8<-- "{rel}"'
        else:
            body = f'```text title="{title}"\n--8<-- "{rel}"\n```'
        return f"{body}\n{provenance_html(snip, snip.provenance())}\n"  # recorded_file checked freshness

    @env.macro
    def generated_path(name, file):
        """Path (relative to the current page's source) of a file recorded by a snippet; checks freshness."""
        docs_path = snippet(name).recorded_file(file).relative_to(DOCS_DIR).as_posix()
        return relative_to_page(env.page, docs_path)

    @env.macro
    def figure(name, file, caption):
        """A recorded image with its caption and provenance."""
        if not file.endswith(IMAGE_SUFFIXES):
            raise ValueError(f"figure(): {file!r} is not an image ({', '.join(IMAGE_SUFFIXES)})")
        snip = snippet(name)
        src = generated_path(name, file)
        return (
            f'<figure markdown="span">\n  ![{caption}]({src})\n  <figcaption>{caption}</figcaption>\n</figure>\n'
            f"{provenance_html(snip, snip.provenance())}\n"  # generated_path checked freshness
        )

