"""mkdocs hook: refuse to build pages from recorded outputs that the code in the checkout did not produce.

Runs first, before any page is rendered, so a stale output stops the build with one line that names the
snippets, what changed, and the command that records them again, instead of a traceback from the first page
that quotes one. Outputs of GPU-only snippets that went stale only because package code changed are the
exception: a CPU cannot record them, so they are built with a stamp on the page (``Snippet.stamp``) until a GPU
records them again; publishing (``FLASHDOC_REQUIRE_FRESH=1``) allows no stamp.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:  # mkdocs loads hooks by path; the tools package lives at the project root
    sys.path.insert(0, ROOT)

from tools.outputs import GPU_RECORD_COMMAND, REFRESH_COMMAND, require_fresh, stale_snippets  # noqa: E402

log = logging.getLogger("mkdocs.hooks.freshness")


def stale_report() -> tuple[str | None, list[str]]:
    """(the one-line error for outputs that must be recorded again, or None; names of outputs shown stamped)."""
    blocking, stamped = [], []
    for state in stale_snippets():
        shown_stamped = state.snippet.gpu_only and state.only_package_changed and not require_fresh()
        (stamped if shown_stamped else blocking).append(state)
    if not blocking:
        return None, [state.snippet.name for state in stamped]
    changed = sorted({m for state in blocking for m in state.changed_modules})
    why = f"{', '.join(changed)} changed" if changed else "; ".join(f"{s.snippet.name}: {s.reason()}" for s in blocking)
    cpu = [s.snippet.name for s in blocking if not s.snippet.gpu_only]
    gpu = [s.snippet.name for s in blocking if s.snippet.gpu_only]
    commands = []
    if cpu:
        commands.append(f"`{REFRESH_COMMAND} -- {' '.join(cpu)}`")
    if gpu:
        commands.append(f"on a CUDA GPU `{GPU_RECORD_COMMAND} {' '.join(gpu)}`")
    names = ", ".join(s.snippet.name for s in blocking)
    return f"stale recorded outputs: {names} ({why}); record them with {' and '.join(commands)}", [
        state.snippet.name for state in stamped
    ]


def on_config(config, **kwargs):
    error, stamped = stale_report()
    if error:
        raise PluginError(error)
    if stamped:
        log.info("shown with a stamp, recorded with older package code (a GPU records them): %s", ", ".join(stamped))
    return config
