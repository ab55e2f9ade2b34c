"""The release this commit upgrades from (e2e/test_release_upgrade.py): the newest tag vX.Y.Z
before HEAD, and the files `make release` wrote for it (docs/release.md).

Without such a tag, or without its files, the upgrade test is deselected with the reason.
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


def previous_tag(repo: Path = REPO) -> str | None:
    """The newest release tag in HEAD's history that does not point at HEAD itself."""
    at_head = set(_git(repo, "tag", "--points-at", "HEAD"))
    tags = [t for t in _git(repo, "tag", "--merged", "HEAD") if TAG.match(t) and t not in at_head]
    return max(tags, key=lambda t: tuple(int(n) for n in TAG.match(t).groups()), default=None)  # type: ignore[union-attr]


def find(repo: Path = REPO, files: str | None = None) -> PreviousRelease | str:
    """The previous release's files, or why there are none (the deselection reason)."""
    try:
        tag = previous_tag(repo)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as err:
        return f"no git history to find the previous release in ({err})"
    if tag is None:
        return "no release tag vX.Y.Z before this commit: nothing to upgrade from"
    version = tag.removeprefix("v")
    where = Path(files or os.environ.get(FILES_ENV) or repo / "dist" / version)
    name = f"dra-fake-{version}"
    release = PreviousRelease(version, where / f"{name}.tgz", where / f"{name}.image.tar")
    for path in (release.chart, release.image):
        if not path.exists():
            return (
                f"the previous release {tag} has no {path.name} in {where}: git worktree add "
                f"/tmp/{tag} {tag}; make -C /tmp/{tag} release VERSION={version}; "
                f"{FILES_ENV}=/tmp/{tag}/dist/{version}"
            )
    return release


@functools.cache
def previous() -> PreviousRelease | str:
    return find()


def missing(repo: Path = REPO) -> str | None:
    """The previous release's tag when its files are missing (hack/kind/previous-release.sh builds
    them); None when there is no such tag or its files are there."""
    tag = previous_tag(repo)
    return tag if tag is not None and not isinstance(find(repo), PreviousRelease) else None


def main(argv: list[str]) -> int:
    """`python -m e2e.releases missing`: print missing()'s tag, if any."""
    if argv != ["missing"]:
        print("usage: python -m e2e.releases missing", file=sys.stderr)
        return 2
    tag = missing()
    if tag:
        print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
