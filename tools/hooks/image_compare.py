"""mkdocs hook: turn the seed posts' image-compare markup into an accessible <img-comparison-slider>.

Authors write (or the ``compare()`` macro writes)::

    <div class="image-compare" data-before="a.png" data-after="b.png">
      <span class="compare-label-before">Raw scores</span>
      <span class="compare-label-after">Softmax</span>
    </div>

Paths are relative to the page's markdown file, like a markdown link, or start with ``/`` for the docs root.
At build time each image must exist (else the build fails), gets its URL relative to the rendered page and
its pixel size, so the slider takes its final height before the images load. The result is the
``img-comparison-slider`` web component (served from assets/vendor/, see vendor_assets.py) with the ARIA
slider role; docs/javascripts/image-compare.js keeps its value announced and adds key steps. The images
carry glightbox's skip class: a click on a slider moves it, it does not open a lightbox.
"""

from __future__ import annotations

import html
import posixpath
import re

from mkdocs.exceptions import PluginError

BLOCK = re.compile(r'<div\s+class="image-compare"(?P<attrs>[^>]*)>(?P<body>.*?)</div>', re.S)
ATTR = re.compile(r'([\w-]+)\s*=\s*"([^"]*)"')
LABEL = re.compile(r'<span\s+class="compare-label-(before|after)"\s*>(.*?)</span>', re.S)


def _resolve(src: str, page, files):
    if "://" in src or src.startswith("//"):
        raise PluginError(
            f"{page.file.src_uri}: image-compare image {src!r} is on another host; the site serves every file itself"
        )
    if src.startswith("/"):
        docs_path = src.lstrip("/")
    else:
        docs_path = posixpath.normpath(posixpath.join(posixpath.dirname(page.file.src_uri), src))
    file = files.get_file_from_path(docs_path)
    if file is None:
        raise PluginError(f"{page.file.src_uri}: image-compare image {src!r} not found (looked for docs/{docs_path})")
    return file


def _size_attrs(file) -> str:
    if file.abs_src_path is None or file.abs_src_path.endswith(".svg"):
        return ""
    from PIL import Image  # pillow comes with matplotlib

    with Image.open(file.abs_src_path) as im:
        return f' width="{im.width}" height="{im.height}"'


def _render(match, page, files) -> str:
    attrs = dict(ATTR.findall(match["attrs"]))
    labels = {"before": "Before", "after": "After"}
    labels.update(
        {side: html.unescape(re.sub(r"<[^>]+>", "", text)).strip() for side, text in LABEL.findall(match["body"])}
    )
    slots = []
    for side, slot in (("before", "first"), ("after", "second")):
        if f"data-{side}" not in attrs:
            raise PluginError(f"{page.file.src_uri}: an image-compare block needs data-{side}")
        file = _resolve(attrs[f"data-{side}"], page, files)
        label = html.escape(labels[side])
        slots.append(
            f'<figure slot="{slot}" class="image-compare__{side}">'
            f'<img class="off-glb" src="{file.url_relative_to(page.file)}" alt="{label}"{_size_attrs(file)}>'
            f'<figcaption aria-hidden="true">{label}</figcaption></figure>'
        )
    value = float(attrs.get("data-value", 50))
    before, after = html.escape(labels["before"]), html.escape(labels["after"])
    return (
        f'<figure class="image-compare">'
        f'<img-comparison-slider value="{value:g}" tabindex="0" role="slider" '
        f'aria-label="Compare {before} (left) with {after} (right)" aria-valuemin="0" aria-valuemax="100" '
        f'aria-valuenow="{value:g}" aria-valuetext="{value:.0f}% {before}, {100 - value:.0f}% {after}">'
        f"{''.join(slots)}</img-comparison-slider></figure>"
    )


def on_page_content(html_text, page, config, files):
    return BLOCK.sub(lambda m: _render(m, page, files), html_text)
