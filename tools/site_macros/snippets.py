"""Macros that put snippet code and recorded snippet outputs on a page.

    {{ code("attention/numpy_attention") }}                    the whole file, with a link to it
    {{ code("attention/numpy_attention", section="softmax") }} one ``# --8<-- [start:softmax]`` section
    {{ code("attention/transformer", collapsed=True, title="The full block") }}   folded by default
    {{ output("attention/numpy_attention") }}                  what it printed, with provenance
    {{ output("triton/benchmark", "ratios.md") }}              a recorded markdown table
    {{ figure("attention/scaling", "saturation.png", "Caption") }}   a recorded image
    {{ install_flashdoc() }}                                   the one line that installs flashdoc
    {{ repo_file("benchmarks/FINDINGS.md") }}                  a link to a file of the repository
    {{ gpu_card("triton/benchmark", article=True) }}           'an H200': the GPU a recording ran on
    {{ gpu_cards(article=True) }}                              'an H200', or 'an H100 and an H200': all of them

The code itself is pulled in by pymdownx.snippets (``check_paths: true``), so a missing file or section
fails the build. Each block's copy button copies a complete program (``tools/programs.py``): for a section,
the file from its top through the section. A page with a block whose snippet imports flashdoc gets the line
that installs it under its title (``tools/hooks/install_line.py``), unless it placed ``install_flashdoc()``.
Outputs are checked against the code that produced them (``tools/outputs.py``); a GPU-only output recorded
with older package code carries a stamp saying so.
"""

from __future__ import annotations

import html
import posixpath

from tools import downloads
from tools.hooks.package_source import commit
from tools.outputs import DOCS_DIR, ROOT, Freshness, Snippet, all_snippets, snippet
from tools.programs import copy_program

IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp")

# Words of a device name that say who made or sold the card rather than which card it is.
BRAND_WORDS = {"NVIDIA", "Tesla", "GeForce", "Quadro", "AMD", "Instinct", "Radeon"}
# Product lines whose next word names the card: "RTX 4090", not "RTX".
LINE_WORDS = {"RTX", "GTX", "TITAN", "Pro"}
# Letters whose spoken name starts with a vowel sound, so that "an" goes before them: an H100, an RTX 4090.
AN_LETTERS = set("AEFHILMNORSX")


def card_name(device: str) -> str:
    """The card a recording's ``device`` names, as prose names it: 'H200' for 'NVIDIA H200', 'H100' for 'NVIDIA
    H100 80GB HBM3', 'A100' for 'NVIDIA A100-SXM4-80GB', 'RTX 4090' for 'NVIDIA GeForce RTX 4090'."""
    words = [w for w in device.replace("-", " ").split() if w not in BRAND_WORDS]
    if not words or device.startswith("CPU"):
        raise ValueError(f"{device!r} names no GPU")
    return " ".join(words[:2]) if words[0] in LINE_WORDS and len(words) > 1 else words[0]


def with_article(card: str) -> str:
    """'an H200', 'a B200'."""
    return f"{'an' if card[0].upper() in AN_LETTERS else 'a'} {card}"


def recorded_card(name: str) -> str:
    """The card that the shown recording of snippet ``name`` ran on; a recording made on the CPU is an error, since
    the prose that names its GPU would then be wrong."""
    prov = snippet(name).check_fresh()
    if not prov.get("gpu") or prov["device"].startswith("CPU"):
        raise ValueError(
            f"{name} was recorded on {prov['device']}, not on a GPU: a page that names the GPU it ran on is wrong; "
            "record it on a CUDA GPU, or name no GPU there"
        )
    return card_name(prov["device"])


def recorded_cards() -> list[str]:
    """The cards that the GPU-only snippets' recordings ran on, each once, in order."""
    return sorted({recorded_card(snip.name) for snip in all_snippets() if snip.gpu_only})


def cards_in_words(cards: list[str], article: bool = False) -> str:
    """'H100 and H200', or with articles 'an H100 and an H200'; a space inside a name does not break."""
    names = [c.replace(" ", "\N{NO-BREAK SPACE}") for c in cards]
    names = [with_article(c) for c in names] if article else names
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def provenance_html(snip: Snippet, prov: dict) -> str:
    """One line under every output saying exactly what produced it."""
    sha = prov["source_sha256"][:10]
    text = (
        f"Recorded by running <code>{snip.rel_path}</code> on <strong>{html.escape(prov['device'])}</strong>"
        f" · torch {prov['torch']} · triton {prov['triton']} · {prov['date']} · source sha256 {sha}"
    )
    state = snip.freshness()  # hashes the modules the recording imported: once per output
    stamped = state.only_package_changed
    if prov.get("commit") and not stamped:  # the stamp names the commit itself
        text += f" · flashdoc {prov['commit'][:10]}"
    if prov.get("interrupted_at_time_limit"):
        text += f" · <strong>stopped at its time limit after {prov['seconds']:.0f} s: partial results</strong>"
    if stamped:
        text += " · " + _stamp_html(state)
    return f'<p class="provenance">{text}</p>'


def _stamp_html(state: Freshness) -> str:
    """The stamp of an output recorded with older package code, short on the page: which recording, how many
    files changed since (listed in its tooltip), and what brings it up to date."""
    files = state.changed_modules
    count = f"{len(files)} of its files" if len(files) > 1 else "one of its files"
    return (
        f'<strong class="fd-stale-stamp" title="changed since: {html.escape(", ".join(files))}">'
        f"recorded with flashdoc {html.escape(state.recorded_with)}, before {count} changed; a run on a GPU "
        "records it again</strong>"
    )


def imports_flashdoc(snip: Snippet) -> bool:
    """Whether running the snippet imported flashdoc (its recorded provenance lists the modules it imported)."""
    prov = snip.provenance() or {}
    return any(rel.startswith("flashdoc/") for rel in prov.get("modules", {}))


def imports_benchmarks(snip: Snippet) -> bool:
    """Whether running the snippet imported the repository's benchmark harness (``benchmarks/``), which the
    package a reader installs does not contain."""
    prov = snip.provenance() or {}
    return any(rel.startswith("benchmarks/") for rel in prov.get("modules", {}))


def _attribute(text: str) -> str:
    """A value for a double-quoted attribute in a fence's ``{ ... }`` options: one line, and no brace or backtick
    that the fence's own syntax could take for its end (entities, which the browser turns back into text)."""
    escaped = html.escape(text, quote=True)
    for char, entity in (("\n", "&#10;"), ("{", "&#123;"), ("}", "&#125;"), ("`", "&#96;")):
        escaped = escaped.replace(char, entity)
    return escaped


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


def repository_link(repo_url: str, path: str) -> str:
    """A link to ``path`` in the repository at the commit the site is built from; a file that is not there fails
    the build, as a missing snippet does."""
    if not (ROOT / path).is_file():
        raise ValueError(f"repo_file: the repository has no file {path!r}")
    url = f"{repo_url.rstrip('/')}/blob/{commit()}/{path}"
    return f'<a href="{html.escape(url)}"><code>{html.escape(path)}</code></a>'


def register(env):
    @env.macro
    def repo_file(path):
        """A link to a file of the repository that a page names (the notes behind a figure, a tool it mentions)."""
        return repository_link(env.conf["repo_url"], path)

    @env.macro
    def gpu_card(name, article=False):
        """'H200' (or 'an H200'): the card the shown recording of snippet ``name`` ran on, for the prose around
        it, so that a recording on another card changes the sentence with the numbers."""
        return cards_in_words([recorded_card(name)], article)

    @env.macro
    def gpu_cards(article=False):
        """'H200', or 'H100 and H200' where they differ: the cards of every GPU-only recording on the site."""
        return cards_in_words(recorded_cards(), article)

    @env.macro
    def install_flashdoc():
        """The one line that installs flashdoc, here (else pages whose code imports it get it under the title)."""
        return downloads.install_line(env.conf["site_url"]) + "\n"

    @env.macro
    def code(name, section=None, title=None, collapsed=False, hl_lines=None):
        """A fenced Python block from ``snippets/<name>.py``, whose copy button copies a complete program, and a
        link to the whole file."""
        snip = snippet(name)
        target = snip.rel_path + (f":{section}" if section else "")
        options = f'.python .fd-program title="{title or snip.rel_path}" data-snippet="{snip.name}"'
        if hl_lines:
            options += f' hl_lines="{hl_lines}"'
        if section:
            options += f' data-section="{section}"'
        if imports_flashdoc(snip):
            options += ' data-imports="flashdoc"'  # tools/hooks/install_line.py puts the install line on the page
        # on the block's div.highlight; material's copy button copies the data-copy of the nearest element that
        # has one instead of the shown lines
        options += f' data-copy="{_attribute(copy_program(snip, section))}"'
        block = f'```{{ {options} }}\n--8<-- "{target}"\n```'
        url = site_relative_url(env.page, snip.rel_path)
        if section:
            caption = (
                f'Section <code>{section}</code> of <a href="{url}">{snip.rel_path}</a>; '
                "the copy button copies it with the lines above it that it needs, as a program that runs."
            )
        else:
            caption = f'Complete and runnable: <a href="{url}">download {snip.rel_path}</a>.'
        if imports_benchmarks(snip):  # the wheel holds flashdoc only
            caption += " It imports the repository's benchmark harness, so it runs from a checkout of the repository."
        caption_html = f'<p class="snippet-source">{caption}</p>'
        if collapsed:
            return f'??? example "{title or snip.rel_path}"\n\n{_indent(block)}\n\n{_indent(caption_html)}\n'
        return f"{block}\n{caption_html}\n"

    @env.macro
    def output(name, file="stdout.txt", title="Output", markdown=False):
        """A recorded output of ``snippets/<name>.py``: text in a block, markdown inline (a ``.md`` file, or
        ``markdown=True`` for a snippet that prints markdown tables)."""
        snip = snippet(name)
        path = snip.recorded_file(file)
        rel = path.relative_to(ROOT).as_posix()  # pymdownx.snippets resolves paths from the project root
        if file.endswith(".md") or markdown:
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
