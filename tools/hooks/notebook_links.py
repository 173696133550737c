"""mkdocs hook: links in notebook pages resolve like links in markdown pages.

mkdocs rewrites ``[text](../blog/posts/post.md)`` in a markdown page to the URL of the page built from that
file. mkdocs-jupyter renders notebooks (docs/notebooks/*.py) to HTML itself, so their links to ``.md`` files
would stay as written and break. This applies the same rewrite to notebook pages. A link to a file that is
not among the docs is left as written; tests/site/test_site.py reports it as broken.
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote

HREF = re.compile(r'href="(?P<path>[^":#?]+\.md)(?P<anchor>#[^"]*)?"')
NOTEBOOK_SUFFIXES = (".py", ".ipynb")


def on_page_content(html, page, config, files):
    if not page.file.src_uri.endswith(NOTEBOOK_SUFFIXES):
        return html

    def rewrite(match):
        target = posixpath.normpath(posixpath.join(posixpath.dirname(page.file.src_uri), unquote(match["path"])))
        file = files.get_file_from_path(target)
        if file is None:
            return match[0]
        return f'href="{file.url_relative_to(page.file)}{match["anchor"] or ""}"'

    return HREF.sub(rewrite, html)
