"""Fixtures for tests that drive the built site in a real headless Chromium.

The site is built once per test session (``mkdocs build --strict`` into a temporary folder) and served on
127.0.0.1. Every page opened through the ``page`` fixture fails its test if the browser logs an error or
tries to reach any host other than 127.0.0.1. Screenshots go to ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("FLASHDOC_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
# As root and on a closed network, Chromium needs these to start quietly (no sandbox, no background calls).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The site, built strictly from the current checkout."""
    site_dir = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return site_dir


@pytest.fixture(scope="session")
def site_url(built_site) -> str:
    handler = functools.partial(QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".mjs": "text/javascript",
        ".webm": "video/webm",
        ".mp4": "video/mp4",
    }

    def log_message(self, format, *args):  # keep pytest output readable
        pass


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs Chromium at {CHROMIUM} (Debian: apt-get install chromium; or set FLASHDOC_CHROMIUM)")
    playwright_api = pytest.importorskip("playwright.sync_api", reason="needs `pip install playwright`")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class PageProblems:
    """Console errors, failed requests and requests to other hosts seen while a page was open."""

    def __init__(self):
        self.console_errors: list[str] = []
        self.external_requests: list[str] = []
        self.failed_requests: list[str] = []

    def assert_clean(self):
        assert not self.external_requests, f"requests left 127.0.0.1: {self.external_requests}"
        assert not self.console_errors, f"console errors: {self.console_errors}"
        assert not self.failed_requests, f"failed requests: {self.failed_requests}"


@pytest.fixture
def page(browser, site_url, request):
    """A fresh browser page on the built site; fails the test on console errors or off-host requests."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    problems = PageProblems()

    def route(route):
        host = urlparse(route.request.url).hostname
        if host in ("127.0.0.1", None) or route.request.url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            problems.external_requests.append(route.request.url)
            route.abort()

    context.route("**/*", route)
    pg = context.new_page()
    pg.on("console", lambda msg: msg.type == "error" and problems.console_errors.append(msg.text))
    pg.on("pageerror", lambda exc: problems.console_errors.append(str(exc)))
    # net::ERR_ABORTED is the browser cancelling a request itself, as a navigation does to the page it leaves
    # (under load, material's late sitemap.xml fetch); a missing file shows as a response status instead
    pg.on(
        "requestfailed",
        lambda req: (
            urlparse(req.url).hostname == "127.0.0.1"
            and req.failure != "net::ERR_ABORTED"
            and problems.failed_requests.append(f"{req.url} ({req.failure})")
        ),
    )
    pg.on(
        "response", lambda resp: resp.status >= 400 and problems.failed_requests.append(f"{resp.url} ({resp.status})")
    )
    pg.problems = problems
    pg.site_url = site_url
    yield pg
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SCREENSHOTS / f"{request.node.name}.png"), full_page=True)
    context.close()
    problems.assert_clean()
