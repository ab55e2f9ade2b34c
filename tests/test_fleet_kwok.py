"""KWOK's controller in a cluster (dra_fake.fleet.kwok, `dra-fake fleet-stages --deployment`): the
manifests run it with the harness's flags and the profile's Stages, with only the rights it needs.
Run on kind in e2e/test_kwok.py (KindBed.start_kwok)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from dra_fake.cli import main
from dra_fake.fleet.core import FLEET_LABEL
from dra_fake.fleet.kwok import NAME, kwok_args, manifests
from dra_fake.fleet.workload import WorkloadProfile, stages_yaml

IMAGE = "example/kwok:v0.8.0"


def by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds = {o["kind"]: o for o in objs}
    assert len(kinds) == len(objs)
    return kinds


def test_the_deployment_runs_kwok_as_the_harness_does_with_the_profiles_stages() -> None:
    profile = WorkloadProfile(start_seconds=2, run_seconds=30, failure_fraction=0.25)
    objs = by_kind(manifests(profile, IMAGE))
    assert set(objs) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment"}
    assert objs["ConfigMap"]["data"] == {"stages.yaml": stages_yaml(profile)}
    spec = objs["Deployment"]["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}  # never two KWOKs at once
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == IMAGE
    # the harness's flags (in-cluster credentials), and a server for the probes
    assert container["args"] == [*kwok_args("/etc/kwok/stages.yaml"), "--server-address=0.0.0.0:10247"]
    assert "--kubeconfig=" in container["args"]
    assert f"--manage-nodes-with-label-selector={FLEET_LABEL}" in container["args"]
    assert "--node-lease-duration-seconds=0" in container["args"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/etc/kwok"]]["configMap"] == {"name": NAME}
    assert pod["serviceAccountName"] == NAME == objs["ServiceAccount"]["metadata"]["name"]
    assert (
        container["securityContext"]["runAsNonRoot"]
        and container["securityContext"]["readOnlyRootFilesystem"]
    )


def test_a_changed_profile_changes_the_pod_template() -> None:
    """The ConfigMap alone would not restart KWOK: its Stages' hash on the template does."""

    def template(profile: WorkloadProfile) -> dict[str, Any]:
        return dict(by_kind(manifests(profile, IMAGE))["Deployment"]["spec"]["template"]["metadata"])

    assert template(WorkloadProfile()) == template(WorkloadProfile())
    assert template(WorkloadProfile()) != template(WorkloadProfile(run_seconds=5))


def test_kwok_gets_only_what_it_does_with_fleet_nodes_and_their_pods() -> None:
    objs = by_kind(manifests(WorkloadProfile(), IMAGE, namespace="kwok"))
    granted = {
        (resource, verb)
        for rule in objs["ClusterRole"]["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if rule["apiGroups"] == [""]
    }
    assert len(granted) == sum(len(r["resources"]) * len(r["verbs"]) for r in objs["ClusterRole"]["rules"])
    reads = {"get", "list", "watch"}
    assert {("nodes", v) for v in reads} | {("pods", v) for v in reads} <= granted
    assert ("pods", "delete") in granted and ("pods/status", "patch") in granted
    assert ("nodes/status", "patch") in granted
    # no write to a Node itself, no Secrets, no Leases (the fleet renews them), no wildcard
    assert not {r for r, v in granted if r in ("secrets", "leases", "*") or v == "*"}
    assert not {v for r, v in granted if r == "nodes"} - reads
    binding = objs["ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": "kwok"}]
    assert binding["roleRef"]["name"] == objs["ClusterRole"]["metadata"]["name"]


def test_fleet_stages_prints_the_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet-stages", "--deployment", IMAGE, "--namespace", "kwok"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs == manifests(WorkloadProfile(), IMAGE, "kwok")
