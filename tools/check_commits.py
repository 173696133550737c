"""Check the messages of the commits made after the one named in ``.ci/commit-base`` (CONTRIBUTING.md, "Commits").

    python tools/check_commits.py              # every commit in <base>..HEAD
    python tools/check_commits.py --rev main   # <base>..main

A message passes when its subject (first line) is at most 72 characters and does not end with a period, and a
body, if there is one, is separated from the subject by a blank line. Commits up to the base predate the rule
and are not checked. Exit status 1 lists every commit that fails, with the reason.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_FILE = ROOT / ".ci" / "commit-base"
MAX_SUBJECT = 72


def problems(message: str) -> list[str]:
    """What is wrong with one commit message (empty when nothing is)."""
    lines = message.rstrip("\n").split("\n")
    subject = lines[0]
    found = []
    if not subject.strip():
        found.append("the subject line is empty")
    if len(subject) > MAX_SUBJECT:
        found.append(f"the subject is {len(subject)} characters, more than {MAX_SUBJECT}")
    if subject.rstrip().endswith("."):
        found.append("the subject ends with a period")
    if len(lines) > 1 and lines[1].strip():
        found.append("the second line is not blank (a blank line separates the subject from the body)")
    return found


def read_base(path: Path = BASE_FILE) -> str:
    """The base commit: the first word of the file's first line that is not blank or a # comment."""
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return line.split()[0]
    raise ValueError(f"{path} names no commit")


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def commits_after(base: str, rev: str = "HEAD", cwd: Path = ROOT) -> list[tuple[str, str]]:
    """(short hash, message) of every commit reachable from rev and not from base, oldest first."""
    try:
        git("cat-file", "-e", f"{base}^{{commit}}", cwd=cwd)
    except subprocess.CalledProcessError:
        raise SystemExit(
            f"commit {base} (from {BASE_FILE.relative_to(ROOT)}) is not in this clone's history; "
            "fetch the full history (git fetch --unshallow) and run again"
        ) from None
    out = git("log", "--reverse", "--format=%h%x00%B%x00", f"{base}..{rev}", cwd=cwd)
    fields = out.split("\0")
    return [(fields[i].strip(), fields[i + 1]) for i in range(0, len(fields) - 1, 2)]


def main(argv: list[str] | None = None, cwd: Path = ROOT, base_file: Path = BASE_FILE) -> int:
    parser = argparse.ArgumentParser(prog="python tools/check_commits.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="HEAD", help="the last commit to check (default: %(default)s)")
    parser.add_argument("--base", help=f"check the commits after this one instead of {BASE_FILE.name}'s")
    args = parser.parse_args(argv)
    base = args.base or read_base(base_file)
    commits = commits_after(base, args.rev, cwd=cwd)
    failures = [(sha, message.split("\n")[0], found) for sha, message in commits if (found := problems(message))]
    for sha, subject, found in failures:
        print(f"{sha} {subject[:80]!r}: {'; '.join(found)}")
    if failures:
        print(
            f"{len(failures)} of {len(commits)} commit messages after {base} break the rules "
            '(CONTRIBUTING.md, "Commits"); reword them with git rebase -i before merging'
        )
        return 1
    print(f"checked {len(commits)} commit messages after {base}: every one follows the rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
