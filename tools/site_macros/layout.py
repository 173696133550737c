"""Macros for laying out media and posts on a page.

    {{ img("a.png") }}                                         one image
    {{ img("a.png, b.png", cap="Left, Right") }}               side by side, a caption under each
    {{ img("a.png, b.png, c.png", cap="A, B, C", cols=3) }}    a grid; `cols` sets the column count
    {{ img("site/attention_maps:scores.png") }}                a file recorded by a snippet (topic/name:file)
    {{ compare("site/attention_maps:scores.png", "site/attention_maps:weights.png",
               before_label="Raw scores", after_label="Softmax") }}  an image-compare slider
    {{ video("site/tile_sweep:tile_sweep.mp4", poster="site/tile_sweep:tile_sweep_poster.png",
             caption="...") }}                                a video with a poster frame
    {{ posts() }}                                              the blog's posts, newest first
    {% call example() %}...{% endcall %}                       markdown source shown above what it renders

An image path is either relative to the page's markdown file, as in a markdown link, or ``topic/name:file``
for a file that ``snippets/<topic>/<name>.py`` recorded; the latter is checked for freshness and gets the
provenance line that every recorded output has. Captions are split on commas; pass a list to use commas
inside a caption. Images open in the lightbox (mkdocs-glightbox) on click.
"""

from __future__ import annotations

import html
import posixpath
import re
import textwrap
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import yaml

from tools.outputs import DOCS_DIR, snippet
from tools.site_macros.snippets import provenance_html, relative_to_page, site_relative_url

POSTS = DOCS_DIR / "blog" / "posts"


class Media:
    """One file that a page shows: where it is under docs/, and which snippet recorded it (if any)."""

    def __init__(self, spec: str, page):
        spec = spec.strip()
        self.snippet = None
        if ":" in spec:
            name, file = spec.split(":", 1)
            self.snippet = snippet(name)
            self.docs_path = self.snippet.recorded_file(file).relative_to(DOCS_DIR).as_posix()
        else:
            page_dir = posixpath.dirname(page.file.src_uri)
            self.docs_path = posixpath.normpath(posixpath.join(page_dir, spec))
            if not (DOCS_DIR / self.docs_path).is_file():
                raise FileNotFoundError(f"{page.file.src_uri}: no file {spec!r} (looked for docs/{self.docs_path})")
        self.page = page

    @property
    def path(self) -> Path:
        return DOCS_DIR / self.docs_path

    def markdown_src(self) -> str:
        """Path for markdown (and the seed's compare div): relative to the page's source file."""
        return relative_to_page(self.page, self.docs_path)

    def html_src(self) -> str:
        """Path for raw HTML, which mkdocs does not rewrite: relative to the rendered page's URL."""
        return site_relative_url(self.page, self.docs_path)


def image_size(path: Path) -> tuple[int, int] | None:
    """Pixel size of a raster image, so the page reserves its space before it loads (no layout shift)."""
    if path.suffix.lower() == ".svg":
        return None
    from PIL import Image  # pillow comes with matplotlib

    with Image.open(path) as im:
        return im.size


def _split(value, n: int, what: str) -> list[str]:
    if value is None:
        return [""] * n
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else [str(v) for v in value]
    if len(items) != n:
        raise ValueError(f"{what}: {len(items)} given for {n} image(s): {items}")
    return items


def _provenance(media: list[Media]) -> str:
    seen = {}
    for m in media:
        if m.snippet is not None:
            seen.setdefault(m.snippet.name, m.snippet)
    return "".join(provenance_html(s, s.provenance()) + "\n" for s in seen.values())  # Media checked freshness


def _post_front_matter(path: Path) -> tuple[dict, str]:
    text = path.read_text(encoding="utf-8")
    meta, body = {}, text
    if text.startswith("---"):
        _, head, body = text.split("---", 2)
        meta = yaml.safe_load(head) or {}
    return meta, body


def _post_date(meta: dict) -> datetime:
    """The post's publication time: a date alone is its midnight. Kept to the minute, since posts of one day
    are ordered by their time."""
    value = meta.get("date")
    if isinstance(value, dict):  # material's blog also takes {created: ..., updated: ...}
        value = value.get("created")
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    raise ValueError(f"a blog post needs a date in its front matter, got {value!r}")


@dataclass(frozen=True)
class Post:
    path: Path
    title: str
    date: datetime
    description: str
    meta: dict


def published_posts() -> list[Post]:
    """Every blog post that is not a draft, newest first (the home page lists these; the tests check them)."""
    posts = []
    for path in sorted(POSTS.rglob("*.md")):
        meta, body = _post_front_matter(path)
        if meta.get("draft"):
            continue
        title = meta.get("title") or next(
            (line[2:].strip() for line in body.splitlines() if line.startswith("# ")), path.stem
        )
        posts.append(Post(path, title, _post_date(meta), meta.get("description", ""), meta))
    return sorted(posts, key=lambda post: post.date, reverse=True)


def register(env):
    @env.macro
    def img(src, cap=None, cols=None, alt=None):
        """One image, or several in a grid with a caption under each (`cols` columns; default: all in a row
        up to three)."""
        media = [Media(s, env.page) for s in (src.split(",") if isinstance(src, str) else src)]
        caps = _split(cap, len(media), "img(cap=...)")
        alts = _split(alt, len(media), "img(alt=...)") if alt is not None else caps
        cols = int(cols or min(len(media), 3))
        figures = []
        for m, c, a in zip(media, caps, alts):
            size = image_size(m.path)
            attrs = f'{{ width="{size[0]}" height="{size[1]}" }}' if size else ""
            caption = f"\n  <figcaption>{c}</figcaption>" if c else ""
            figures.append(
                f'<figure markdown="span">\n  ![{a or Path(m.docs_path).stem}]({m.markdown_src()}){attrs}'
                f"{caption}\n</figure>"
            )
        body = "\n".join(figures)
        return f'<div class="fd-gallery" style="--fd-cols: {cols}" markdown>\n{body}\n</div>\n{_provenance(media)}'

    @env.macro
    def compare(before, after, before_label="Before", after_label="After"):
        """An image-compare slider, written in the seed's syntax (tools/hooks/image_compare.py renders it)."""
        b, a = Media(before, env.page), Media(after, env.page)
        return (
            f'<div class="image-compare" data-before="{b.markdown_src()}" data-after="{a.markdown_src()}">\n'
            f'  <span class="compare-label-before">{html.escape(before_label)}</span>\n'
            f'  <span class="compare-label-after">{html.escape(after_label)}</span>\n'
            f"</div>\n{_provenance([b, a])}"
        )

    @env.macro
    def video(src, poster, caption=""):
        """A video file with its poster frame, sized from the poster so the page does not jump."""
        v, p = Media(src, env.page), Media(poster, env.page)
        size = image_size(p.path)
        dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
        kind = {".mp4": "video/mp4", ".webm": "video/webm"}[v.path.suffix.lower()]
        figcaption = f"\n  <figcaption>{caption}</figcaption>" if caption else ""
        return (
            f'<figure class="fd-video">\n'
            f'  <video controls muted playsinline preload="metadata" poster="{p.html_src()}"{dims}>\n'
            f'    <source src="{v.html_src()}" type="{kind}">\n'
            f'    <a href="{v.html_src()}">Download the video</a>\n'
            f"  </video>{figcaption}\n</figure>\n{_provenance([v, p])}"
        )

    @env.macro
    def posts(limit=None):
        """The blog's published posts, newest first: title (linked), date and description."""
        lines = []
        for post in published_posts()[:limit]:
            link = relative_to_page(env.page, post.path.relative_to(DOCS_DIR).as_posix())
            day = post.date
            line = f"- **[{post.title}]({link})** · {day:%B} {day.day}, {day.year}"
            # the title already names the part; the description's own "Part N: " is for feeds and previews
            description = re.sub(r"^Part \d+: ", "", post.description)
            lines.append(line + (f"  \n  {description[:1].upper()}{description[1:]}" if description else ""))
        return "\n".join(lines) + "\n"

    @env.macro
    def example(caller):
        """``{% call example() %}{% raw %}markdown{% endraw %}{% endcall %}``: the source, then its result.

        Both come from the one block of text, so the source shown is exactly what produced the result.
        """
        source = textwrap.dedent(caller()).strip("\n")
        fence = "````"  # longer than any fence inside an example
        return (
            f'{fence}{{ .markdown .fd-source title="Markdown" }}\n{source}\n{fence}\n\n'
            f'<div class="fd-example" markdown>\n\n{env.render(source)}\n\n</div>\n'
        )
