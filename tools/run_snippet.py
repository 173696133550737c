"""Run one snippet as ``python <file>`` would, and write which of this repository's modules it imported.

    python tools/run_snippet.py ROOT IMPORTS_JSON SNIPPET_FILE

The recorder (``tools/record_snippets.py``) starts this instead of ``python <file>`` so that provenance can
name the code a run depended on: at exit, whatever way the snippet ends (normally, ``sys.exit``, an exception,
Ctrl-C), the paths (relative to ROOT, the repository) of the modules in ``sys.modules`` whose files lie in
the repository are written to IMPORTS_JSON. It imports nothing but the standard library itself, so every module
listed was imported by the snippet (directly or through flashdoc).
"""

import atexit
import json
import os
import runpy
import sys

# Inside the repository but not its code: environments and installed or fetched packages.
NOT_CODE = ("/.nox/", "/.venv/", "/node_modules/", "/site-packages/", "/build/")


def repository_modules(root: str, snippet_file: str) -> list[str]:
    paths = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = os.path.realpath(file)
        if path.endswith((".pyc", ".pyo")):
            continue
        if path.startswith(root + os.sep) and path != snippet_file and not any(p in path for p in NOT_CODE):
            paths.add(os.path.relpath(path, root).replace(os.sep, "/"))
    return sorted(paths)


def main() -> None:
    root, imports_json, snippet_file = os.path.realpath(sys.argv[1]), sys.argv[2], os.path.realpath(sys.argv[3])

    def write_imports():
        with open(imports_json, "w", encoding="utf-8") as f:
            json.dump(repository_modules(root, snippet_file), f)

    atexit.register(write_imports)
    # What `python file.py` sets up: argv, and the script's folder first on sys.path (not this tools/ folder).
    sys.argv = [snippet_file]
    sys.path[0] = os.path.dirname(snippet_file)
    runpy.run_path(snippet_file, run_name="__main__")


if __name__ == "__main__":
    main()
