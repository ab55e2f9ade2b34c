"""e2e/releases.py: which release the upgrade test starts from, and why it is deselected when
there is none (no tag before this commit, or no files for it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from e2e.releases import FILES_ENV, PreviousRelease, find, missing


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
    assert missing(tmp_path) == "v0.10.0"  # the kind lane builds it
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
