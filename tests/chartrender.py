"""`helm template charts/dra-fake` for the chart tests (tests/test_chart*.py), and lookups in what it
rendered. Needs helm from hack/install-tools.sh: a module importing this one is skipped without it,
unless DRA_FAKE_REQUIRE_TOOLS=1 (then it fails).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
HELM = Path(os.environ.get("HELM", REPO / ".tools" / "bin" / "helm"))
CHART = REPO / "charts" / "dra-fake"
V1 = ["resource.k8s.io/v1/DeviceClass", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"]

if not HELM.exists():
    if os.environ.get("DRA_FAKE_REQUIRE_TOOLS") == "1":
        raise RuntimeError(f"{HELM} missing: run hack/install-tools.sh")
    pytest.skip(f"needs {HELM}: run hack/install-tools.sh (make chart-check does)", allow_module_level=True)


def render(
    kube: str = "1.37.0", apis: list[str] | None = None, *, ns: str = "dra-fake", **sets: str
) -> list[dict[str, Any]]:
    args = [str(HELM), "template", "r", str(CHART), "-n", ns, "--kube-version", kube]
    for a in V1 if apis is None else apis:
        args += ["--api-versions", a]
    for k, v in sets.items():
        args += ["-f", v] if k == "values" else ["--set", f"{k}={v}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise AssertionError(out.stderr)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def names(docs: list[dict[str, Any]], kind: str) -> list[str]:
    return [d["metadata"]["name"] for d in of_kind(docs, kind)]


def by_name(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [obj] = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    return obj


def kinds_and_names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}
