"""The chart ships the ComputeDomain CRDs in charts/dra-fake/crds/ (helm installs that directory
before the templates); the repository's crds/ is the single source (the local cluster and
e2e/localcluster/install.py use it). Copies, because helm packages no symlinks reliably: this test fails
when they differ. Runs without helm (make test)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_chart_crds_are_copies_of_the_repositorys() -> None:
    source = {p.name: p.read_bytes() for p in sorted((REPO / "crds").glob("*.yaml"))}
    chart = {p.name: p.read_bytes() for p in sorted((REPO / "charts" / "dra-fake" / "crds").iterdir())}
    assert source, "no CRDs in crds/"
    assert chart == source, (
        "charts/dra-fake/crds/ differs from crds/: run `cp crds/*.yaml charts/dra-fake/crds/`"
    )
