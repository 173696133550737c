"""mkdocs hook: a page whose code imports flashdoc says, under its title, how to install it, in one line.

The ``code()`` macro marks each block whose snippet imported flashdoc when recorded (``data-imports``); a page
with such a block gets ``tools.downloads.install_line`` after its first heading, unless it already shows the
line where its author wanted it (the ``install_flashdoc()`` macro).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:  # mkdocs loads hooks by path; the tools package lives at the project root
    sys.path.insert(0, ROOT)

from tools.downloads import install_line  # noqa: E402


def on_page_content(html, page, config, files):
    if 'data-imports="flashdoc"' not in html or 'class="fd-install"' in html:
        return html
    line = install_line(config["site_url"])
    end = html.find("</h1>")
    return html[: end + 5] + "\n" + line + html[end + 5 :] if end >= 0 else line + "\n" + html
