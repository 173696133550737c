"""Where each snippet's recorded outputs live, and whether they are still fresh.

The one place that knows the layout of ``docs/generated/``. The recorder (``tools/record_snippets.py``),
the site macros (``tools/site_macros``) and the tests all go through these functions, so data flows one
way: snippet source -> recorded outputs (with provenance) -> page.

Layout, for ``snippets/<topic>/<name>.py``::

    docs/generated/<topic>/<name>/
        stdout.txt        what the snippet printed
        provenance.json   what produced these files: the snippet's sha256, the sha256 of every module of this
                          repository that the run imported (flashdoc, tools, ...), device, versions, date
        <files>           every file the snippet wrote into its working directory

Outputs are fresh while the snippet and every module it imported are byte for byte what they were when it
was recorded. A change to one kernel therefore marks stale exactly the outputs whose run imported that file,
and the report names the file.
"""

from __future__ import annotations

import hashlib
import json
import os
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
# On a GPU machine without nox (the H200 box has torch and Triton only), from the repository root:
GPU_RECORD_COMMAND = "python3 -m tools.record_snippets --require-gpu"
# The provenance.json layout written by tools/record_snippets.py; 1 had no "modules".
PROVENANCE_FORMAT = 2


class StaleOutputError(RuntimeError):
    """A page shows outputs that the current snippet source did not produce."""


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def module_hashes(rel_paths) -> dict[str, str]:
    """``{path relative to the repo: sha256}`` for the given files, sorted; a missing file hashes as "missing"."""
    return {rel: sha256_file(ROOT / rel) if (ROOT / rel).is_file() else "missing" for rel in sorted(rel_paths)}


def code_sha256(modules: dict[str, str]) -> str:
    """One hash for a set of module hashes: what a page stamps as the package code an output was recorded with."""
    text = "".join(f"{rel} {digest}\n" for rel, digest in sorted(modules.items()))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Freshness:
    """Whether a snippet's recorded outputs were produced by the code in the checkout now, and if not, why."""

    snippet: "Snippet"
    provenance: dict | None
    source_changed: bool = False
    changed_modules: tuple[str, ...] = ()  # recorded modules whose file differs now (or is gone)

    @property
    def fresh(self) -> bool:
        return self.provenance is not None and not self.source_changed and not self.changed_modules

    @property
    def only_package_changed(self) -> bool:
        """Stale only because package code changed (the snippet itself did not): a GPU-only output may still be
        shown, stamped, until a GPU records it again."""
        return self.provenance is not None and not self.source_changed and bool(self.changed_modules)

    @property
    def recorded_with(self) -> str:
        """Short name of the package code the outputs were recorded with: the commit if known, else a hash."""
        prov = self.provenance or {}
        if prov.get("commit"):
            return prov["commit"][:10]
        return code_sha256(prov.get("modules", {}))[:10]

    def reason(self) -> str:
        if self.provenance is None:
            return "never recorded"
        if self.source_changed:
            return "the snippet changed"
        return "changed since: " + ", ".join(self.changed_modules)


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
        if self.gpu_only:
            return f"{GPU_REFRESH_COMMAND}, or there: {GPU_RECORD_COMMAND} {self.name}"
        return f"{REFRESH_COMMAND} -- {self.name}"

    def provenance(self) -> dict | None:
        path = self.output_dir / "provenance.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def freshness(self) -> Freshness:
        prov = self.provenance()
        if prov is None:
            return Freshness(self, None)
        recorded = prov.get("modules")
        if recorded is None:  # format 1 never said which code ran: it cannot be shown to be fresh
            raise StaleOutputError(
                f"{self.output_dir.relative_to(ROOT)}/provenance.json predates per-module provenance "
                f"(format {PROVENANCE_FORMAT}); record it again with: {self.refresh_command}"
            )
        now = module_hashes(recorded)
        changed = tuple(rel for rel, digest in recorded.items() if now[rel] != digest)
        return Freshness(self, prov, prov["source_sha256"] != self.source_sha256, changed)

    def check_fresh(self, allow_stamped: bool = True) -> dict:
        """Return the provenance, or raise StaleOutputError naming the snippet and the command that fixes it.

        A GPU-only snippet whose own source is unchanged but whose package code changed since its GPU recording
        passes when ``allow_stamped``: its page shows the outputs with a stamp saying so
        (``site_macros.snippets._stamp_html``), since a CPU cannot record them. Publishing
        (``FLASHDOC_REQUIRE_FRESH=1``) allows no stamps.
        """
        state = self.freshness()
        prov = state.provenance
        if prov is None:
            raise StaleOutputError(f"{self.rel_path} has no recorded outputs; record them with: {self.refresh_command}")
        if state.source_changed:
            raise StaleOutputError(
                f"{self.rel_path} changed after its outputs were recorded "
                f"(on {prov['date']}, {prov['device']}); refresh them with: {self.refresh_command}"
            )
        if state.changed_modules and not (allow_stamped and self.gpu_only and not require_fresh()):
            raise StaleOutputError(
                f"{self.rel_path}: code it imports changed after its outputs were recorded "
                f"({', '.join(state.changed_modules)}); refresh them with: {self.refresh_command}"
            )
        return prov

    def stamp(self) -> str | None:
        """For outputs shown although package code changed since they were recorded (GPU-only ones), a sentence
        saying so with every changed file, for messages (the page shows a shorter stamp,
        ``site_macros.snippets._stamp_html``); None for fresh outputs."""
        state = self.freshness()
        if not state.only_package_changed:
            return None
        return (
            f"recorded with flashdoc {state.recorded_with}; the package has changed since "
            f"({', '.join(state.changed_modules)})"
        )

    def recorded_file(self, file: str) -> Path:
        """Path of one file this snippet recorded (``stdout.txt`` or one it wrote); checks freshness first."""
        prov = self.check_fresh()
        if file != "stdout.txt" and file not in prov["files"]:
            written = ", ".join(prov["files"]) or "nothing besides stdout.txt"
            raise FileNotFoundError(f"{self.rel_path} recorded no file {file!r}; it recorded: {written}")
        return self.output_dir / file


def require_fresh() -> bool:
    """Publishing sets FLASHDOC_REQUIRE_FRESH=1: then no output may be shown stamped as older than the code."""
    return os.environ.get("FLASHDOC_REQUIRE_FRESH", "") not in ("", "0")


def stale_snippets() -> list[Freshness]:
    """Every snippet whose recorded outputs the current checkout did not produce, in a stable order."""
    out = []
    for snip in all_snippets():
        try:
            state = snip.freshness()
        except StaleOutputError:  # an old provenance format: stale, with no module to name
            state = Freshness(snip, snip.provenance(), source_changed=True)
        if not state.fresh:
            out.append(state)
    return out


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
