"""The site's building blocks, driven in Chromium on the style-guide page, which shows every one of them."""

from __future__ import annotations

import re

import pytest

STYLE_GUIDE = "style-guide/"
CALLOUT_TYPES = [
    "note",
    "abstract",
    "tip",
    "success",
    "question",
    "warning",
    "critical",
    "example",
    "proof",
    "definition",
]


def open_style_guide(page):
    page.goto(page.site_url + STYLE_GUIDE)
    page.wait_for_load_state("load")


def test_every_callout_type_has_its_own_icon_and_colour(page):
    open_style_guide(page)
    looks = {}
    for kind in CALLOUT_TYPES:
        title = page.locator(f".fd-example .{kind} > :is(.admonition-title, summary)").first
        assert title.count() == 1, f"no rendered {kind} callout"
        looks[kind] = title.evaluate("""el => {
            const icon = getComputedStyle(el, "::before");
            return {mask: icon.maskImage || icon.webkitMaskImage, colour: icon.backgroundColor,
                    border: getComputedStyle(el.parentElement).borderColor, width: icon.width};
        }""")
        assert looks[kind]["mask"].startswith('url("data:image/svg+xml'), f"{kind}: no icon: {looks[kind]}"
        assert looks[kind]["width"] != "0px" and looks[kind]["colour"] == looks[kind]["border"], looks[kind]
    assert len({v["mask"] for v in looks.values()}) == len(CALLOUT_TYPES), "two callout types share an icon"
    assert len({v["colour"] for v in looks.values()}) >= len(CALLOUT_TYPES) - 1, looks  # tip/success may be close


def test_obsidian_callouts_are_converted_outside_code_only(page):
    open_style_guide(page)
    proof = page.locator(".fd-example .admonition.proof", has_text="Softmax is shift-invariant")
    assert proof.count() == 1
    folded = page.locator(".fd-example details.question", has_text="What does the running maximum buy?")
    assert folded.count() == 1 and folded.get_attribute("open") is None
    # The same syntax inside the markdown source blocks is shown as written.
    assert page.locator(".fd-source", has_text="> [!PROOF] Softmax is shift-invariant").count() == 1
    assert "[!" not in " ".join(page.locator(".fd-example").all_inner_texts())


def test_collapsible_code_opens_on_click(page):
    open_style_guide(page)
    folded = page.locator(".fd-example details", has_text="The program that draws the video below")
    code = folded.locator(".highlight", has_text="imageio_ffmpeg")
    assert folded.get_attribute("open") is None and not code.is_visible()
    folded.locator("summary").click()
    assert folded.get_attribute("open") is not None
    code.wait_for(state="visible")
    assert folded.locator("p.snippet-source a").get_attribute("href").endswith("snippets/site/tile_sweep.py")


def test_math_is_typeset_by_katex_served_here(page):
    open_style_guide(page)
    page.wait_for_function(
        "document.querySelectorAll('.arithmatex').length > 0 && "
        "[...document.querySelectorAll('.arithmatex')].every(el => el.querySelector('.katex'))"
    )
    assert page.locator(".fd-example .katex-display").count() >= 1
    # No TeX left as text outside code blocks, and KaTeX's own fonts (not fallbacks) are in use.
    leftover = page.evaluate("""() => {
        const article = document.querySelector("article").cloneNode(true);
        article.querySelectorAll("pre, code, .katex-mathml").forEach(el => el.remove());
        return article.textContent.match(/\\\\\\(|\\\\\\[|\\$\\$|\\\\frac|\\\\sqrt/g);
    }""")
    assert leftover is None, f"raw TeX left on the page: {leftover}"
    page.evaluate("document.fonts.ready")
    assert page.evaluate("document.fonts.check('16px KaTeX_Main')")


def slider_value(slider) -> float:
    return float(slider.evaluate("el => el.value"))


def test_compare_slider_drags_moves_by_keyboard_and_announces(page):
    open_style_guide(page)
    slider = page.get_by_role("slider", name=re.compile("Raw scores.*Softmax weights"))
    assert slider.count() == 1
    slider.scroll_into_view_if_needed()
    assert slider.get_attribute("aria-valuenow") == "50"

    box = slider.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.25, y, steps=8)
    page.mouse.up()
    assert slider_value(slider) == pytest.approx(25, abs=2)
    assert slider.get_attribute("aria-valuenow") == str(round(slider_value(slider)))
    assert slider.get_attribute("aria-valuetext").endswith("Softmax weights")

    slider.focus()
    before = slider_value(slider)
    page.keyboard.press("ArrowRight")
    # A press is one step of 5, plus however far the component's own animation slid while the key was down
    # (a few units on a loaded machine); a PageUp's 25 would be the wrong step.
    assert before + 5 - 0.5 <= slider_value(slider) < before + 15
    page.keyboard.press("End")
    assert slider.get_attribute("aria-valuenow") == "100"
    page.keyboard.press("Home")
    assert slider.get_attribute("aria-valuenow") == "0"
    assert slider.get_attribute("aria-valuetext") == "0% Raw scores, 100% Softmax weights"
    # Holding a key slides smoothly (the component's own animation).
    page.keyboard.down("ArrowRight")
    page.wait_for_timeout(300)
    page.keyboard.up("ArrowRight")
    assert slider_value(slider) > 5
    slider.evaluate("el => el.value = 50")


def test_compare_slider_reserves_its_size_and_skips_the_lightbox(page):
    open_style_guide(page)
    figure = page.locator("figure.image-compare").first
    images = figure.locator("img")
    assert images.count() == 2
    for i in range(2):
        img = images.nth(i)
        # Width and height attributes give the box its aspect ratio before the image arrives: no layout shift.
        assert img.get_attribute("width") and img.get_attribute("height")
        assert img.evaluate("el => getComputedStyle(el).aspectRatio").startswith("auto ")
        assert img.evaluate("el => el.closest('a') === null"), "a slider image is wrapped in a lightbox link"
    slider = figure.locator("img-comparison-slider")
    width, height = int(images.first.get_attribute("width")), int(images.first.get_attribute("height"))
    box = slider.bounding_box()
    assert box["height"] == pytest.approx(box["width"] * height / width, abs=2)
    slider.click()
    assert page.locator(".glightbox-container").count() == 0


def test_image_grid_has_columns_captions_and_lightbox(page):
    open_style_guide(page)
    grid = page.locator(".fd-gallery", has_text="Causal weights")
    figures = grid.locator("figure")
    assert figures.count() == 3
    assert figures.locator("figcaption").all_inner_texts() == ["Scores", "Weights", "Causal weights"]
    boxes = [figures.nth(i).bounding_box() for i in range(3)]
    assert boxes[0]["y"] == boxes[1]["y"] == boxes[2]["y"] and boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]

    figures.first.locator("img").click()
    page.locator(".glightbox-container .gslide-image img").first.wait_for(state="visible")
    page.keyboard.press("Escape")

    page.set_viewport_size({"width": 400, "height": 800})  # a phone: one column
    boxes = [figures.nth(i).bounding_box() for i in range(3)]
    assert boxes[0]["y"] < boxes[1]["y"] < boxes[2]["y"]


def test_video_loads_its_metadata(page):
    open_style_guide(page)
    video = page.locator(".fd-example video")
    assert video.get_attribute("poster").endswith("tile_sweep_poster.png")
    video.scroll_into_view_if_needed()
    page.wait_for_function("document.querySelector('.fd-example video').readyState >= 1", timeout=10_000)
    duration, width = video.evaluate("v => [v.duration, v.videoWidth]")
    assert duration > 1 and width > 0


def test_code_block_copy_button_and_annotations(page):
    open_style_guide(page)
    block = page.locator(".fd-example .highlight", has_text="record_snippets")
    assert block.locator("button[data-md-type=copy]").count() == 1
    marker = block.locator(".md-annotation").first
    marker.click()
    assert "records what it printed" in page.locator(".md-tooltip--active, .md-annotation__inner").first.inner_text()


def test_tabs_switch(page):
    open_style_guide(page)
    example = page.locator(".fd-example", has=page.locator(".tabbed-set"))
    example.get_by_text("scaled_dot_product_attention", exact=True).click()
    assert example.get_by_text("like PyTorch").is_visible()
    assert not example.get_by_text("like the flash-attn package").is_visible()


def test_theme_toggle_switches_light_and_dark(page):
    page.goto(page.site_url)
    scheme = page.evaluate("document.body.getAttribute('data-md-color-scheme')")
    page.locator("form[data-md-component=palette] label:visible").first.click()
    assert page.evaluate("document.body.getAttribute('data-md-color-scheme')") != scheme


def test_search_finds_a_page(page):
    page.goto(page.site_url)
    page.locator("label.md-search__icon, .md-search__input").first.click()
    page.locator("input.md-search__input").press_sequentially("slider")
    result = page.locator(".md-search-result__item a[href*='style-guide/'][href$='#image-compare-slider']")
    result.wait_for(state="visible", timeout=10_000)
