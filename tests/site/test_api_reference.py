"""The API reference page documents the whole public API, as the package's docstrings say it.

The page is rendered from the source by mkdocstrings; what can go wrong is a public function that the page never
names (added to a module's ``__all__`` but not to ``docs/reference.md``), or a docstring whose sections the
renderer cannot read, which shows as a return value or a parameter without a name.
"""

from __future__ import annotations

import importlib
import inspect
import re
from html.parser import HTMLParser

import pytest

# each module whose ``__all__`` is public API, and the names in it that are not callables to document
PUBLIC = {
    "flashdoc": {"reference", "__version__"},
    "flashdoc.flash_attn_interface": set(),
    "flashdoc.bert_padding": set(),
    "flashdoc.parallel": {"LAYOUTS"},
    "flashdoc.integrations.transformers": {"NAME"},
}


class Anchors(HTMLParser):
    """The ids of a page's elements."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])


def documented_objects() -> list[str]:
    """Every public callable by the dotted path of the object itself (a re-export is documented where it lives,
    so flashdoc.flash_attn_interface.flash_attn_func is flashdoc.flash_attn_func's entry)."""
    paths = {}
    for module_name, skip in PUBLIC.items():
        module = importlib.import_module(module_name)
        for name in module.__all__:
            if name in skip:
                continue
            obj = getattr(module, name)
            assert callable(obj), f"{module_name}.{name} is not callable: add it to PUBLIC's exceptions"
            paths.setdefault(id(obj), f"{module_name}.{name}")
    return sorted(paths.values())


def public_object(dotted: str):
    """The object at a dotted path that ``documented_objects`` returned."""
    module_name, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


@pytest.fixture(scope="module")
def reference(built_site):
    path = built_site / "reference" / "index.html"
    assert path.exists(), "the site has no API reference page (docs/reference.md)"
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def reference_ids(reference) -> set[str]:
    parser = Anchors()
    parser.feed(reference)
    return parser.ids


@pytest.mark.parametrize("dotted", documented_objects())
def test_every_public_function_has_an_entry(reference_ids, dotted):
    assert dotted in reference_ids, f"docs/reference.md has no `::: {dotted}` entry"


def test_every_parameter_and_return_value_has_a_name(reference):
    """mkdocstrings renders an item it could not parse (a Returns line that wrapped without indenting) as a
    nameless bullet, and every argument of a function whose docstring lists its arguments must be listed by
    name (an entry may name several, "k, v")."""
    unnamed = r'class="doc-section-item field-body">\s*–\s*<div class="doc-md-description">\s*(.{0,60})'
    nameless = re.findall(unnamed, reference)
    assert not nameless, f"items without a name (a wrapped line not indented under its item?): {nameless}"
    listed = {
        name.strip() for entry in re.findall(r"<b><code>([^<]+)</code></b>", reference) for name in entry.split(",")
    }
    for dotted in documented_objects():
        obj = public_object(dotted)
        if inspect.isclass(obj) or "Args:" not in (inspect.getdoc(obj) or ""):
            continue
        for parameter in inspect.signature(obj).parameters.values():
            if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                assert parameter.name in listed, f"{dotted}: argument {parameter.name} is not on the reference page"


def documented_arguments(doc: str) -> list[str]:
    """The names a Google-style docstring's Args section lists (an item may name several: "k, v: ...")."""
    lines = doc.splitlines()
    if "Args:" not in lines:
        return []
    names = []
    for line in lines[lines.index("Args:") + 1 :]:
        if line and not line.startswith(" "):  # the next section, or the text after the list
            break
        item = re.match(r"    (\w[\w, ]*):", line)
        if item:
            names += [name.strip() for name in item[1].split(",")]
    return names


@pytest.mark.parametrize("dotted", documented_objects())
def test_documented_arguments_exist(dotted):
    """Each name in a docstring's Args section is an argument of the function (the renderer's own check is off,
    since it does not read an item that names two)."""
    obj = public_object(dotted)
    parameters = set(inspect.signature(obj).parameters)
    unknown = [arg for arg in documented_arguments(inspect.getdoc(obj) or "") if arg not in parameters]
    assert not unknown, f"{dotted}'s docstring documents arguments it does not have: {unknown}"
