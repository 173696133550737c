"""The blog as a series a reader can follow, checked on the built site: no page shows the project's internal
words, no post takes more than 30 minutes to read (mkdocs-material's own estimate, as the page shows it), and
the blog index lists the parts in order."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

POSTS = Path(__file__).resolve().parents[2] / "docs/blog/posts"
MAX_MINUTES = 30
# Words from the project's engineering log, which mean nothing to a reader of the site.
INTERNAL = re.compile(r"\bissue \d+|\bsession \d+|\bNOT met\b|\btargets?\b|\bperf/", re.IGNORECASE)


class VisibleText(HTMLParser):
    """The text a browser would show: everything outside script, style, svg and the head."""

    HIDDEN = {"script", "style", "svg", "head", "title"}

    def __init__(self):
        super().__init__()
        self.hidden = 0
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.hidden += tag in self.HIDDEN

    def handle_endtag(self, tag):
        self.hidden -= tag in self.HIDDEN

    def handle_data(self, data):
        if not self.hidden:
            self.text.append(data)


def visible_text(path: Path) -> str:
    parser = VisibleText()
    parser.feed(path.read_text(encoding="utf-8"))
    return " ".join(" ".join(parser.text).split())


def test_no_page_shows_internal_words(built_site):
    pages = sorted(built_site.rglob("*.html"))
    assert len(pages) > 10, pages
    found = {}
    for path in pages:
        text = visible_text(path)
        hits = sorted({m.group(0) for m in INTERNAL.finditer(text)})
        if hits:
            i = INTERNAL.search(text).start()
            found[path.relative_to(built_site).as_posix()] = (hits, text[max(0, i - 60) : i + 60])
    assert not found, f"pages that show internal words: {found}"


@pytest.mark.parametrize(
    "slug", [re.search(r"^slug: (\S+)$", p.read_text(), re.M).group(1) for p in sorted(POSTS.glob("*.md"))]
)
def test_post_reads_in_at_most_30_minutes(built_site, slug):
    (html,) = built_site.glob(f"blog/*/*/*/{slug}/index.html")
    minutes = int(re.search(r"(\d+) min read", visible_text(html)).group(1))
    assert minutes <= MAX_MINUTES, f"{slug} reads in {minutes} minutes"


def test_series_parts_link_in_order(built_site):
    """Each "Part N" post names its part in its title, and the blog index lists the parts in order."""
    index = visible_text(built_site / "blog/index.html")
    start_here = index[index.rfind("Start here") : index.rfind("All posts")]
    parts = [int(n) for n in re.findall(r"Part (\d+):", start_here)]
    assert parts == sorted(parts) and parts[0] == 1, parts
    titles = {
        int(re.search(r"^# Part (\d+):", p.read_text(), re.M).group(1))
        for p in POSTS.glob("*.md")
        if re.search(r"^# Part \d+:", p.read_text(), re.M)
    }
    assert set(parts) == titles, (parts, titles)


def test_newest_first_lists_run_the_series_backwards(built_site):
    """Posts of one day are ordered by their time, so both "newest first" lists (the home page's and the blog
    index's) read Part N down to Part 1."""
    for page in ("index.html", "blog/index.html"):
        text = visible_text(built_site / page)
        newest_first = text[text.rfind("newest first") :]
        parts = [int(n) for n in re.findall(r"Part (\d+):", newest_first)]
        parts = list(dict.fromkeys(parts))  # a title and its description may both name the part
        assert parts == sorted(parts, reverse=True) and parts[-1] == 1, (page, parts)


def test_a_phone_reader_can_jump_within_a_post(page, built_site):
    """Below 60em the theme hides a post's table of contents and its drawer holds only the blog's archive and
    categories: javascripts/post-toc.js adds the post's sections there, one entry per heading of the right-hand
    contents, and following one closes the drawer at that section. At desktop width the copy stays hidden."""
    (html,) = built_site.glob("blog/*/*/*/decoding/index.html")
    url = page.site_url + html.parent.relative_to(built_site).as_posix() + "/"
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(url)
    headings = page.locator(".md-sidebar--secondary .md-nav--secondary a.md-nav__link")
    entries = page.locator(".md-nav--primary .fd-post-toc a.md-nav__link")
    assert entries.count() == headings.count() > 5

    def names(links):
        return [" ".join(text.split()) for text in links.all_text_contents()]

    assert names(entries) == names(headings)
    page.locator("label.md-header__button[for='__drawer']").click()
    page.locator(".fd-post-toc__title").wait_for()
    target = entries.filter(has_text="Paged KV caches and block tables")
    target.click()
    page.wait_for_function("() => !document.getElementById('__drawer').checked")
    assert page.url.endswith("#paged-kv-caches-and-block-tables")
    heading = page.locator("#paged-kv-caches-and-block-tables").bounding_box()
    assert 0 <= heading["y"] < 200, heading  # scrolled to it, under the header
    page.set_viewport_size({"width": 1280, "height": 900})
    assert not page.locator(".fd-post-toc__title").is_visible()
