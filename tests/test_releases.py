"""e2e/releases.py: which release the upgrade test starts from, and why it is deselected when
there is none (no tag before this commit, or no files for it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from e2e.releases import FILES_ENV, PreviousRelease, Tag, find, missing, previous_tag


@pytest.fixture(autouse=True)
def no_files_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FILES_ENV, raising=False)


def git(repo: Path, *args: str) -> None:
    env_args = ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "-C", str(repo), *env_args, *args], check=True, capture_output=True, timeout=30)


def commit(repo: Path, tag: str | None = None) -> None:
    git(repo, "commit", "-q", "--allow-empty", "-m", "c")
    if tag:
        git(repo, "tag", tag)


def test_no_tag_before_this_commit_means_nothing_to_upgrade_from(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    commit(tmp_path, "v0.1.0")  # a tag on HEAD itself is this release, not the previous one
    assert find(tmp_path) == "no release tag vX.Y.Z before this commit: nothing to upgrade from"
    assert missing(tmp_path) is None  # nothing for the kind lane to build


def test_the_newest_earlier_release_tag_and_its_files(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    commit(tmp_path, "v0.2.0")
    commit(tmp_path, "v0.10.0")
    commit(tmp_path, "not-a-release")
    commit(tmp_path)
    reason = find(tmp_path)
    assert isinstance(reason, str) and "v0.10.0 has no dra-fake-0.10.0.tgz" in reason
    assert missing(tmp_path) == Tag("v0.10.0", "v0.10.0")  # the kind lane builds it
    dist = tmp_path / "dist" / "0.10.0"
    dist.mkdir(parents=True)
    chart, image = dist / "dra-fake-0.10.0.tgz", dist / "dra-fake-0.10.0.image.tar"
    chart.write_text("x")
    image.write_text("x")
    assert find(tmp_path) == PreviousRelease("0.10.0", chart, image)
    assert missing(tmp_path) is None


def test_outside_a_git_checkout_the_reason_says_so(tmp_path: Path) -> None:
    reason = find(tmp_path / "none")
    assert isinstance(reason, str) and reason.startswith("no git history")


def test_a_clone_without_tags_finds_the_releases_the_changelog_records(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    commit(tmp_path)
    first = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    commit(tmp_path)
    (tmp_path / "CHANGELOG.md").write_text(
        "## 0.2.0\n\nThe second release: tag `v0.2.0` (commit 0123456789abcdef).\n\n"  # not in history
        f"## 0.1.0\n\nThe first release: tag `v0.1.0` (commit {first}).\n"
    )
    assert previous_tag(tmp_path) == Tag("v0.1.0", first)
    reason = find(tmp_path)
    assert isinstance(reason, str) and f"git worktree add /tmp/v0.1.0 {first};" in reason
    git(tmp_path, "tag", "v0.0.9", first)  # a clone with tags goes by them
    assert previous_tag(tmp_path) == Tag("v0.0.9", "v0.0.9")


def test_the_changelog_release_at_head_is_this_release_not_the_previous(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    commit(tmp_path)
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    (tmp_path / "CHANGELOG.md").write_text(f"tag `v0.1.0` (commit {head[:7]})\n")
    assert previous_tag(tmp_path) is None
