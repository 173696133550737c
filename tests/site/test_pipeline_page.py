"""The end-to-end pipeline page shows a snippet, its recorded output and the provenance of that output."""

import json

from tools.outputs import snippet


def test_pipeline_page_shows_code_output_and_provenance(page):
    page.goto(page.site_url + "about/how-this-site-works/")
    snip = snippet("attention/numpy_attention")
    prov = json.loads((snip.output_dir / "provenance.json").read_text())

    code = page.locator(".highlight", has_text="def attention(Q, K, V)")
    assert code.count() == 1
    recorded = (snip.output_dir / "stdout.txt").read_text().strip().splitlines()
    output_block = page.locator(".highlight", has_text=recorded[0])
    assert output_block.count() == 1
    for line in recorded:
        assert line.strip() in output_block.inner_text()

    provenance = page.locator("p.provenance").first.inner_text()
    assert prov["device"] in provenance and prov["source_sha256"][:10] in provenance

    # The link under the code block downloads the very file the block shows.
    href = page.locator("p.snippet-source a").first.get_attribute("href")
    response = page.request.get(page.url + href)
    assert response.ok and response.text() == snip.source
