"""Whole-site checks: the blog and its feed list every post, no link or image is broken, every page loads
cleanly in the browser (no console error, nothing fetched from another host)."""

from __future__ import annotations

import posixpath
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

from tools.site_macros.layout import published_posts

ROOT = Path(__file__).resolve().parents[2]


class LinkParser(HTMLParser):
    """Every URL a page refers to (links, images, scripts, styles, media) and every id it defines."""

    ATTRS = {"a": "href", "link": "href", "img": "src", "script": "src", "source": "src", "video": "poster"}

    def __init__(self):
        super().__init__()
        self.urls: list[tuple[str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and "name" in attrs:
            self.ids.add(attrs["name"])
        url = attrs.get(self.ATTRS.get(tag, ""))
        # <link rel=canonical/alternate> name the published address and feeds; the browser loads neither.
        if url and not (tag == "link" and attrs.get("rel") in ("canonical", "alternate")):
            self.urls.append((tag, url))


def parse(path: Path) -> LinkParser:
    parser = LinkParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def site_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html" and "snippets" not in p.parts)


def visit_pages(page, site: Path):
    """Open every page of the built site in turn in the browser page; yields each one's path in the site."""
    for path in site_pages(site):
        rel = path.relative_to(site).as_posix()
        page.goto(page.site_url + rel.removesuffix("index.html"))
        yield rel


def target_file(site: Path, page: Path, url: str) -> Path:
    rel = posixpath.normpath(posixpath.join(page.parent.relative_to(site).as_posix(), unquote(url)))
    path = site / rel
    return path / "index.html" if url.endswith("/") or path.is_dir() else path


def test_no_broken_internal_link_or_image(built_site):
    pages = site_pages(built_site)
    assert len(pages) >= 4  # home, blog, style guide, about
    parsed = {p: parse(p) for p in pages}
    broken = []
    for page, links in parsed.items():
        for tag, url in links.urls:
            parts = urlparse(url)
            if parts.scheme in ("data", "mailto", "blob"):
                continue
            if parts.scheme or parts.netloc:
                # Links to other sites are fine for readers to follow; anything the page *loads* must be local.
                if tag != "a":
                    broken.append(f"{page.relative_to(built_site)}: loads {url} from another host")
                continue
            path_part, fragment = urldefrag(url)
            target = target_file(built_site, page, path_part) if path_part else page
            if not target.is_file():
                broken.append(
                    f"{page.relative_to(built_site)}: {tag} {url} -> missing {target.relative_to(built_site)}"
                )
            elif fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else parse(target).ids
                if unquote(fragment) not in ids:
                    broken.append(f"{page.relative_to(built_site)}: {url} -> no #{fragment} in that page")
    assert not broken, "\n".join(broken)


def test_no_page_shows_an_include_line_as_text(built_site):
    """Code from the package reaches a page through include lines (--8<-- "file:section") that the build replaces;
    one it did not recognise (reformatted, misspelt) would show on the page as text instead of the code."""
    marker = re.compile(r"--8\s*(?:<|&lt;)\s*--")
    shown = [str(p.relative_to(built_site)) for p in site_pages(built_site) if marker.search(p.read_text("utf-8"))]
    assert not shown, f"pages showing an include line instead of its code: {shown}"


def test_every_page_loads_cleanly(page, built_site):
    """The fixture fails this test on any console error, failed request or request to another host."""
    broken_images = []
    for rel in visit_pages(page, built_site):
        page.wait_for_load_state("networkidle")  # leaving earlier would abort the page's own late requests
        broken_images += [
            f"{rel}: {src}"
            for src in page.evaluate(
                "[...document.images].filter(i => i.complete && i.naturalWidth === 0).map(i => i.src)"
            )
        ]
    assert not broken_images, broken_images


# Snippets keep to this many columns so that their code blocks do not scroll sideways in a 1280 px window.
SNIPPET_COLUMNS = int(re.search(r"^line-length = (\d+)", (ROOT / "snippets/ruff.toml").read_text(), re.M).group(1))


def found_on_every_page(page, site: Path, script: str, arg=None) -> list[str]:
    """Open every page (its folded blocks too) and collect what ``script`` returns there, as 'page: item'."""
    found = []
    for rel in visit_pages(page, site):
        page.evaluate('() => document.querySelectorAll("details").forEach(d => { d.open = true; })')
        found += [f"{rel}: {item}" for item in page.evaluate(script, arg)]
    return found


def test_snippet_code_fits_its_block_at_1280_px(page, built_site):
    """Every snippet block whose lines keep to the snippets' column limit shows them whole, without a
    horizontal scroll bar, in the fixture's 1280 px window (folded blocks opened first)."""
    scrolled = found_on_every_page(
        page,
        built_site,
        """columns => [...document.querySelectorAll(".fd-program pre > code")]
            .filter(c => Math.max(...c.innerText.split("\\n").map(l => l.length)) <= columns)
            .filter(c => c.scrollWidth > c.clientWidth)
            .map(c => c.closest(".fd-program").dataset.snippet)""",
        SNIPPET_COLUMNS,
    )
    assert not scrolled, f"these scroll at 1280 px though their lines keep to {SNIPPET_COLUMNS} columns: {scrolled}"


def test_display_math_fits_its_column_at_1280_px(page, built_site):
    """Every display equation shows whole in the fixture's 1280 px window: the box scrolls sideways, but an
    overlay scrollbar stays hidden until scrolled, so an equation wider than the column reads as cut off (break
    it over lines with ``gathered`` or ``aligned``)."""
    wide = found_on_every_page(
        page,
        built_site,
        """() => [...document.querySelectorAll("div.arithmatex")]
            .filter(m => m.scrollWidth > m.clientWidth + 1)
            .map(m => m.querySelector("annotation")?.textContent.slice(0, 60) ?? "")""",
    )
    assert not wide, f"display equations wider than their column at 1280 px: {wide}"


def test_tables_fit_their_column_at_1280_px(page, built_site):
    """Every markdown table shows whole in the fixture's 1280 px window. A table wider than the text column scrolls
    sideways, and its cut-off columns were the ones the prose read (the theme's minimum header width alone made a
    table of ten columns 1,000 px wide); the stylesheet lets header cells shrink to their longest word."""
    wide = found_on_every_page(
        page,
        built_site,
        """() => [...document.querySelectorAll("article .md-typeset__scrollwrap")]
            .filter(w => w.querySelector("table:not([class])") && w.scrollWidth > w.clientWidth + 1)
            .map(w => [...w.querySelectorAll("th")].slice(0, 3).map(h => h.textContent.trim()).join(" | "))""",
    )
    assert not wide, f"tables wider than their column at 1280 px: {wide}"


def test_no_table_of_contents_entry_shows_math_source(built_site):
    """Math in a heading is typeset in the heading, but the table of contents and search show its LaTeX source:
    headings write it in plain text instead (Unicode: √dₖ)."""
    entry = re.compile(r'<a[^>]*class="md-nav__link"[^>]*>(.*?)</a>', re.S)
    tags = re.compile(r"<[^>]+>|\s+")
    shown = [
        (str(p.relative_to(built_site)), tags.sub(" ", text).strip())
        for p in site_pages(built_site)
        for text in entry.findall(p.read_text("utf-8"))
        if "\\(" in text or "\\[" in text
    ]
    assert not shown, f"table-of-contents entries showing LaTeX: {shown}"


def test_no_heading_permalink_wraps_onto_a_line_of_its_own(page, built_site):
    """A heading's permalink mark is hidden until hovered, so one that wrapped alone onto a second line would
    leave a blank-looking line under the heading (a title that just fits a 1280 px window did). At a desktop
    and a phone width, the mark sits on the line of the heading's last word on every page."""
    alone = []
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for rel in visit_pages(page, built_site):
            alone += [
                f"{width} px, {rel}: {heading}"
                for heading in page.evaluate(
                    """() => [...document.querySelectorAll(".md-typeset .headerlink")].filter(link => {
                        const text = document.createRange();
                        text.selectNodeContents(link.parentElement);
                        text.setEndBefore(link);
                        const lines = [...text.getClientRects()];
                        return lines.length > 0
                            && link.getBoundingClientRect().top >= Math.max(...lines.map(r => r.bottom)) - 1;
                    }).map(link => link.parentElement.textContent.trim())"""
                )
            ]
    assert not alone, "permalinks on a line of their own:\n" + "\n".join(alone)


def test_home_page_and_blog_list_every_post(page):
    posts = published_posts()
    page.goto(page.site_url, wait_until="networkidle")
    assert page.locator("video").count() == 1
    for post in posts:
        page.goto(page.site_url, wait_until="networkidle")  # leaving earlier aborts the page's own requests
        page.locator("article a", has_text=post.title).first.click()
        page.wait_for_load_state("networkidle")
        assert page.locator("article h1").first.inner_text().rstrip("¶").strip() == post.title

    page.goto(page.site_url + "blog/", wait_until="networkidle")
    excerpts = page.locator("article.md-post--excerpt")
    per_page = int(re.search(r"pagination_per_page:\s*(\d+)", (ROOT / "mkdocs.yml").read_text())[1])
    assert excerpts.count() == min(len(posts), per_page)
    for post in posts[:per_page]:  # published_posts() is newest first
        excerpt = excerpts.filter(has_text=post.title)
        assert excerpt.count() == 1, post.title
        meta = excerpt.locator(".md-post__meta").inner_text()
        assert str(post.date.year) in meta and "read" in meta  # date and reading time
        assert excerpt.locator(".md-post__authors img").count() >= 1
        for category in post.meta.get("categories", []):
            assert category in meta


def test_rss_feed_lists_every_post(page):
    posts = published_posts()
    response = page.request.get(page.site_url + "feed_rss_created.xml")
    assert response.ok
    channel = ET.fromstring(response.text()).find("channel")
    titles = [item.findtext("title") for item in channel.findall("item")]
    assert sorted(titles) == sorted(p.title for p in posts)
    for item in channel.findall("item"):
        assert "/blog/" in item.findtext("link")
