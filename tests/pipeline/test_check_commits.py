"""tools/check_commits.py, the CI check of commit messages, on messages and on a throwaway repository."""

from __future__ import annotations

import subprocess

import pytest

from tools import check_commits

GOOD_SUBJECT = "Add a sliding-window mask to the forward"


@pytest.mark.parametrize(
    "message",
    [
        GOOD_SUBJECT,
        GOOD_SUBJECT + "\n",
        GOOD_SUBJECT + "\n\nWhy, with the figures: 1.07x at 4k.\n",
        "x" * 72,
        "Merge branch 'house'",
    ],
)
def test_messages_that_follow_the_rules(message):
    assert check_commits.problems(message) == []


@pytest.mark.parametrize(
    "message, reason",
    [
        ("x" * 73, "73 characters, more than 72"),
        (GOOD_SUBJECT + ".", "ends with a period"),
        (GOOD_SUBJECT + "\nno blank line before the body", "second line is not blank"),
        ("\n\nA body without a subject", "subject line is empty"),
    ],
)
def test_messages_that_break_them(message, reason):
    assert any(reason in found for found in check_commits.problems(message)), check_commits.problems(message)


def test_the_base_is_the_first_commit_named_in_the_file(tmp_path):
    base = tmp_path / "commit-base"
    base.write_text("# a comment\n\n94a15b4 the last commit before the rule\n")
    assert check_commits.read_base(base) == "94a15b4"
    base.write_text("# only a comment\n")
    with pytest.raises(ValueError, match="names no commit"):
        check_commits.read_base(base)


def test_only_commits_after_the_base_are_checked(tmp_path, capsys):
    def git(*args):
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    git("init", "-q")
    git(
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "An old essay of a subject, long before the rule existed, that ran on and on.",
    )
    base = git("rev-parse", "HEAD")
    git("commit", "-q", "--allow-empty", "-m", GOOD_SUBJECT, "-m", "The why, with a figure.")
    base_file = tmp_path / "commit-base"
    base_file.write_text(base + "\n")
    assert check_commits.main([], cwd=tmp_path, base_file=base_file) == 0
    assert "checked 1 commit messages after" in capsys.readouterr().out

    git("commit", "-q", "--allow-empty", "-m", "Fixed it.")
    assert check_commits.main([], cwd=tmp_path, base_file=base_file) == 1
    out = capsys.readouterr().out
    assert "'Fixed it.': the subject ends with a period" in out and "1 of 2 commit messages" in out
    assert "An old essay" not in out
