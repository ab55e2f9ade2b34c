"""hack/release.sh (make release): the packaged chart carries the release's version, the notes come
from CHANGELOG.md, the checksums verify. The image step needs docker: SKIP_IMAGE=1 here (the
README's kind path builds and loads the image tarball: e2e/kindcluster/readme.py).

Needs helm (hack/install-tools.sh); without it the chart tests are skipped, unless
DRA_FAKE_REQUIRE_TOOLS=1 (then they fail), as tests/test_chart.py."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
HELM = Path(os.environ.get("HELM", REPO / ".tools" / "bin" / "helm"))


def release(version: str, dist: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SKIP_IMAGE": "1", "DIST": str(dist), "HELM": str(HELM)}
    env.pop("REGISTRY", None)
    return subprocess.run(
        [str(REPO / "hack" / "release.sh"), version], env=env, capture_output=True, text=True, timeout=120
    )


def needs_helm() -> None:
    if not HELM.exists():
        if os.environ.get("DRA_FAKE_REQUIRE_TOOLS") == "1":
            raise RuntimeError(f"{HELM} missing: run hack/install-tools.sh")
        pytest.skip(f"needs {HELM}: run hack/install-tools.sh")


@pytest.mark.parametrize(("version", "message"), [("1.2", "VERSION must be x.y.z"), ("9.9.9", "no entry")])
def test_release_needs_a_version_and_its_changelog_entry(tmp_path: Path, version: str, message: str) -> None:
    done = release(version, tmp_path)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert not (tmp_path / version).exists()


def test_the_packaged_chart_has_the_version_and_the_checksums_verify(tmp_path: Path) -> None:
    needs_helm()
    done = release("0.1.0", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "0.1.0"
    assert sorted(p.name for p in out.iterdir()) == ["NOTES.md", "PUSH", "SHA256SUMS", "dra-fake-0.1.0.tgz"]
    with tarfile.open(out / "dra-fake-0.1.0.tgz") as tgz:
        chart = yaml.safe_load(tgz.extractfile("dra-fake/Chart.yaml").read())  # type: ignore[union-attr]
        names = tgz.getnames()
    assert (chart["version"], chart["appVersion"]) == ("0.1.0", "0.1.0")
    assert "dra-fake/values.schema.json" in names and "dra-fake/README.md" in names
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == 3, check.stdout
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert (out / "NOTES.md").read_text().splitlines()[0] in changelog
    assert "helm push dra-fake-0.1.0.tgz oci://${REGISTRY}/charts" in (out / "PUSH").read_text()
    assert "nothing pushed" in done.stdout
