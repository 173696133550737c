"""Where each snippet's recorded outputs live, and whether they are still fresh.

The one place that knows the layout of ``docs/generated/``. The recorder (``tools/record_snippets.py``),
the site macros (``tools/site_macros``) and the tests all go through these functions, so data flows one
way: snippet source -> recorded outputs (with provenance) -> page.

Layout, for ``snippets/<topic>/<name>.py``::

    docs/generated/<topic>/<name>/
        stdout.txt        what the snippet printed
        provenance.json   device, versions, date, sha256 of the source that produced these files
        <files>           every file the snippet wrote into its working directory
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS_DIR = ROOT / "snippets"
DOCS_DIR = ROOT / "docs"
GENERATED_DIR = DOCS_DIR / "generated"

# A snippet whose meaning needs a GPU (a benchmark) carries this line; on a CPU machine it still runs, as a
# smoke test, but its GPU-recorded outputs are kept.
GPU_ONLY_MARKER = "# flashdoc: gpu-only"

REFRESH_COMMAND = "nox -s snippets"
GPU_REFRESH_COMMAND = "nox -s publish  (on a machine with a CUDA GPU)"


class StaleOutputError(RuntimeError):
    """A page shows outputs that the current snippet source did not produce."""


@dataclass(frozen=True)
class Snippet:
    path: Path  # absolute path of the .py file

    @property
    def name(self) -> str:
        """``topic/name``: the snippet's id, used in pages and in the generated folder."""
        return self.path.relative_to(SNIPPETS_DIR).with_suffix("").as_posix()

    @property
    def rel_path(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    @property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def source_sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    @property
    def gpu_only(self) -> bool:
        return any(line.strip() == GPU_ONLY_MARKER for line in self.source.splitlines())

    @property
    def output_dir(self) -> Path:
        return GENERATED_DIR / self.name

    @property
    def refresh_command(self) -> str:
        return GPU_REFRESH_COMMAND if self.gpu_only else f"{REFRESH_COMMAND} -- {self.name}"

    def provenance(self) -> dict | None:
        path = self.output_dir / "provenance.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def check_fresh(self) -> dict:
        """Return the provenance, or raise StaleOutputError naming the snippet and the command that fixes it."""
        prov = self.provenance()
        if prov is None:
            raise StaleOutputError(
                f"{self.rel_path} has no recorded outputs; record them with: {self.refresh_command}"
            )
        if prov["source_sha256"] != self.source_sha256:
            raise StaleOutputError(
                f"{self.rel_path} changed after its outputs were recorded "
                f"(on {prov['date']}, {prov['device']}); refresh them with: {self.refresh_command}"
            )
        return prov

    def recorded_file(self, file: str) -> Path:
        """Path of one file this snippet recorded (``stdout.txt`` or one it wrote); checks freshness first."""
        prov = self.check_fresh()
        if file != "stdout.txt" and file not in prov["files"]:
            written = ", ".join(prov["files"]) or "nothing besides stdout.txt"
            raise FileNotFoundError(f"{self.rel_path} recorded no file {file!r}; it recorded: {written}")
        return self.output_dir / file


def all_snippets() -> list[Snippet]:
    """Every snippet file, in a stable order (files starting with '_' are helpers, not snippets)."""
    return [
        Snippet(p)
        for p in sorted(SNIPPETS_DIR.rglob("*.py"))
        if not p.name.startswith("_") and "__pycache__" not in p.parts
    ]


def snippet(name: str) -> Snippet:
    """Look a snippet up by ``topic/name`` (with or without ``.py``, with or without ``snippets/``)."""
    name = name.removeprefix("snippets/").removesuffix(".py")
    path = SNIPPETS_DIR / f"{name}.py"
    if not path.is_file():
        known = ", ".join(s.name for s in all_snippets())
        raise FileNotFoundError(f"no snippet {name!r} (looked for {path}); known snippets: {known}")
    return Snippet(path)
