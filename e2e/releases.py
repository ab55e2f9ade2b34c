"""The release this commit upgrades from (e2e/test_release_upgrade.py): the newest tag vX.Y.Z
before HEAD, and the files `make release` wrote for it (docs/release.md). A clone without tags (one
made from commits alone) finds the releases CHANGELOG.md records with their commits instead.

Without such a release, or without its files, the upgrade test is deselected with the reason.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
# CHANGELOG.md's line for each release, e.g. "The first release: tag `v0.1.0` (commit 3475ad0)."
RECORDED = re.compile(r"tag `(v\d+\.\d+\.\d+)` \(commit ([0-9a-f]{7,40})\)")
FILES_ENV = "DRA_FAKE_PREVIOUS_RELEASE_DIR"  # dist/<version> of the previous release, if not here


@dataclass(frozen=True)
class PreviousRelease:
    version: str
    chart: Path  # dra-fake-<version>.tgz
    image: Path  # dra-fake-<version>.image.tar (dra-fake:<version>)


def _git(repo: Path, *args: str) -> list[str]:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.split()


@dataclass(frozen=True)
class Tag:
    name: str  # vX.Y.Z
    ref: str  # what to check out: the tag, or the commit CHANGELOG.md records for it


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in TAG.match(name).groups())  # type: ignore[union-attr]


def previous_tag(repo: Path = REPO) -> Tag | None:
    """The newest release tag in HEAD's history that does not point at HEAD itself; without any
    tag, the newest release CHANGELOG.md records at a commit in HEAD's history before HEAD."""
    at_head = set(_git(repo, "tag", "--points-at", "HEAD"))
    tags = [t for t in _git(repo, "tag", "--merged", "HEAD") if TAG.match(t) and t not in at_head]
    if tags:
        newest = max(tags, key=_version)
        return Tag(newest, newest)
    return max(_recorded(repo), key=lambda t: _version(t.name), default=None)


def _recorded(repo: Path) -> list[Tag]:
    changelog = repo / "CHANGELOG.md"
    if not changelog.exists():
        return []
    [head] = _git(repo, "rev-parse", "HEAD")
    found = []
    for name, commit in RECORDED.findall(changelog.read_text()):
        earlier = subprocess.run(
            ["git", "-C", str(repo), "merge-base", "--is-ancestor", commit, "HEAD"],
            capture_output=True,
            timeout=30,
        )
        if earlier.returncode == 0 and not head.startswith(commit):
            found.append(Tag(name, commit))
    return found


def find(repo: Path = REPO, files: str | None = None) -> PreviousRelease | str:
    """The previous release's files, or why there are none (the deselection reason)."""
    try:
        tag = previous_tag(repo)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as err:
        return f"no git history to find the previous release in ({err})"
    if tag is None:
        return "no release tag vX.Y.Z before this commit: nothing to upgrade from"
    version = tag.name.removeprefix("v")
    where = Path(files or os.environ.get(FILES_ENV) or repo / "dist" / version)
    name = f"dra-fake-{version}"
    release = PreviousRelease(version, where / f"{name}.tgz", where / f"{name}.image.tar")
    for path in (release.chart, release.image):
        if not path.exists():
            return (
                f"the previous release {tag.name} has no {path.name} in {where}: git worktree add "
                f"/tmp/{tag.name} {tag.ref}; make -C /tmp/{tag.name} release VERSION={version}; "
                f"{FILES_ENV}=/tmp/{tag.name}/dist/{version}"
            )
    return release


@functools.cache
def previous() -> PreviousRelease | str:
    return find()


def missing(repo: Path = REPO) -> Tag | None:
    """The previous release's tag when its files are missing (hack/kind/previous-release.sh builds
    them); None when there is no such release or its files are there."""
    tag = previous_tag(repo)
    return tag if tag is not None and not isinstance(find(repo), PreviousRelease) else None


def main(argv: list[str]) -> int:
    """`python -m e2e.releases missing`: print missing()'s tag and what to check out, if any."""
    if argv != ["missing"]:
        print("usage: python -m e2e.releases missing", file=sys.stderr)
        return 2
    tag = missing()
    if tag:
        print(tag.name, tag.ref)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
