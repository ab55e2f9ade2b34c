"""The chart's objects, rendered for 1.32, 1.33 and this server, with and without pools, valid
against the schemas this API server serves (kubeconform, strict). A render whose DeviceClass version
the server does not serve has no schema here: the local control plane serves v1beta1, v1beta2 and v1
(all three renders checked), kind's 1.37 only v1 (this server's render), kind's 1.33 v1beta1 and
v1beta2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from kubernetes import client

from e2e.rbac.bed import CHART, CHART_BED, KUBECONFORM, REPO, helm_template, resource_version, served

pytestmark = CHART_BED


def test_rendered_objects_valid_against_this_servers_schemas(
    chart_kubeconfig: Path, admin: client.ApiClient, tmp_path: Path
) -> None:
    schemas = tmp_path / "schemas"
    crds = [REPO / "crds", CHART / "crds"]
    gen = [sys.executable, str(REPO / "hack" / "chart-schemas.py")]
    gen += ["--kubeconfig", str(chart_kubeconfig), "--out", str(schemas)]
    for c in crds:
        gen += ["--crds", str(c)]
    subprocess.run(gen, check=True, timeout=120)
    targets = {
        "1.32": [
            "resource.k8s.io/v1beta1/DeviceClass",
            "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
        ],
        "1.33": ["resource.k8s.io/v1beta1/DeviceClass", "resource.k8s.io/v1beta2/DeviceClass"],
        "latest": served(admin),
    }
    version = client.VersionApi(admin).get_code().git_version.lstrip("v")
    newest = resource_version(admin)  # what the chart renders its DeviceClasses in for this server
    checked = []
    for target, apis in targets.items():
        expected = {"1.32": "v1beta1", "1.33": "v1beta2"}.get(target, newest)
        if f"resource.k8s.io/{expected}/DeviceClass" not in targets["latest"]:
            continue
        checked.append(target)
        for values in (None, CHART / "ci" / "pools-values.yaml"):
            extra = ["-f", str(values)] if values else []
            docs = helm_template(version if target == "latest" else f"{target}.0", apis, *extra)
            manifest = tmp_path / f"{target}.yaml"
            manifest.write_text(yaml.safe_dump_all(docs))
            assert {d["apiVersion"] for d in docs if d["kind"] == "DeviceClass"} == {
                f"resource.k8s.io/{expected}"
            }
            # rendered whatever Helm is told of the server's APIs
            assert any(d["kind"] == "ValidatingAdmissionPolicy" for d in docs), target
            out = subprocess.run(
                [
                    str(KUBECONFORM),
                    "-strict",
                    "-summary",
                    "-schema-location",
                    str(schemas) + "/{{ .ResourceKind }}{{ .KindSuffix }}.json",
                    str(manifest),
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert out.returncode == 0, f"{target} {values}: {out.stdout}{out.stderr}"
            assert "Skipped: 0" in out.stdout and "Invalid: 0" in out.stdout, out.stdout
    assert "latest" in checked, checked
