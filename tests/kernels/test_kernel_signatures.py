"""The kernels' ``do_not_specialize`` lists name real parameters.

Triton matches these names against the kernel's parameters and skips a name that matches none without a word,
so a renamed parameter silently becomes specialised again: an offset that happens to equal 1 then compiles as a
constant, which the Gluon kernels' score state does not accept. Read from the source, so it runs on any machine.
"""

import ast
from pathlib import Path

import pytest

KERNELS = sorted((Path(__file__).resolve().parents[2] / "flashdoc" / "kernels").glob("*.py"))


def _jit_lists(path: Path):
    """(kernel name, its parameters, the names in its decorator's do_not_specialize) for each kernel in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {
        node.targets[0].id: node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        params = {a.arg for a in node.args.args + node.args.kwonlyargs}
        for deco in node.decorator_list:
            if not isinstance(deco, ast.Call):
                continue
            for kw in deco.keywords:
                if kw.arg != "do_not_specialize":
                    continue
                value = names.get(kw.value.id, kw.value) if isinstance(kw.value, ast.Name) else kw.value
                listed = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                yield node.name, params, listed


CASES = [(path.name, *case) for path in KERNELS for case in _jit_lists(path)]


def test_some_kernels_are_checked():
    assert len(CASES) >= 6, [c[:2] for c in CASES]


@pytest.mark.parametrize("module, kernel, params, listed", CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_do_not_specialize_names_parameters(module, kernel, params, listed):
    unknown = [name for name in listed if name not in params]
    assert not unknown, f"{module}: {kernel}'s do_not_specialize names no parameter called {unknown}"
