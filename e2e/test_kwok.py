"""KWOK fleets: `dra-fake fleet` publishes 20 nodes x 8 GPUs, KWOK's controller (built from its Go
module; the harness's process, or on kind a Deployment of the offline image: TestBed.start_kwok)
plays the kubelet of those nodes. The real scheduler allocates and
reserves the pods' claims on fleet devices; KWOK starts the pods and finishes them as the workload
profile says (dra_fake.fleet.workload); the resourceclaim controller releases the claims."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dra_fake.fleet.core import FLEET_LABEL, FLEET_TOLERATION
from dra_fake.fleet.workload import OUTCOME_ANNOTATION, WorkloadProfile
from e2e.fleetrun import running_fleet
from e2e.kube import Kube, gpu_claim_template, pod_with_claim_template, poll
from e2e.testbed import TestBed

NODES, GPUS, PER_POD = 20, 8, 4
PODS = NODES * GPUS // PER_POD  # the whole fleet
pytestmark = pytest.mark.needs("kwok")


@contextmanager
def kwok_fleet(bed: TestBed, kubeconfig: Path, tmp_path: Path, profile: WorkloadProfile) -> Iterator[str]:
    """A fleet of NODES nodes with their slices published (`dra-fake fleet` run here, against the
    bed's API server), and KWOK playing `profile` on them."""
    kube, name = bed.kube, f"kwok{uuid.uuid4().hex[:5]}"
    with running_fleet(kube, kubeconfig, tmp_path / "fleet.log", name, NODES):
        bed.start_kwok(profile)
        try:

            def published() -> bool:
                nodes = {
                    s["spec"]["nodeName"] for s in kube.slices() if s["spec"]["nodeName"].startswith(name)
                }
                return len(nodes) == NODES

            poll(f"slices of the {NODES} fleet nodes", published, 120, 0.5)
            yield name
        finally:
            bed.stop_kwok()


def fleet_pod(
    name: str, fleet: str, restart: str = "Never", annotations: dict[str, str] | None = None
) -> Any:
    pod = pod_with_claim_template(name, "gpus")
    pod["metadata"]["annotations"] = annotations or {}
    pod["spec"]["nodeSelector"] = {FLEET_LABEL: fleet}
    pod["spec"]["tolerations"] = [FLEET_TOLERATION]  # fleet nodes are tainted (docs/security.md)
    pod["spec"]["restartPolicy"] = restart
    return pod


def listed(kube: Kube, ns: str, plural: str) -> list[dict[str, Any]]:
    if plural == "pods":
        resp: Any = kube.core.list_namespaced_pod(ns, _preload_content=False)
        return list(json.loads(resp.data)["items"])
    return kube.claims(ns)


def terminated(pod: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]
    return dict(state.get("terminated") or {})


def test_kwok_runs_fleet_pods_with_claims_to_completion(
    bed: TestBed, kubeconfig: Path, kube: Kube, ns: str, tmp_path: Path
) -> None:
    """40 pods of 4 GPUs fill the fleet: each lands on a fleet node, its claim allocated there and
    reserved for it while it is Running; after the profile's 20 s each Succeeded (exit code 0), and
    the resourceclaim controller deletes their claims."""
    with kwok_fleet(bed, kubeconfig, tmp_path, WorkloadProfile(start_seconds=1, run_seconds=20)) as fleet:
        kube.create(gpu_claim_template("gpus", PER_POD), ns)
        for i in range(PODS):
            kube.create(fleet_pod(f"job-{i:02d}", fleet), ns)
        seen_running: dict[str, str] = {}  # pod -> its node, with the claim allocated and reserved there
        problems: list[str] = []

        def watch() -> bool:
            claims = {c["metadata"]["name"]: c for c in listed(kube, ns, "claims")}
            pods = listed(kube, ns, "pods")
            for pod in pods:
                name, node = pod["metadata"]["name"], pod["spec"].get("nodeName", "")
                if pod["status"].get("phase") != "Running" or name in seen_running:
                    continue
                statuses = pod["status"].get("resourceClaimStatuses") or [{}]
                claim = claims.get(statuses[0].get("resourceClaimName", ""), {})
                status = claim.get("status", {})
                results = status.get("allocation", {}).get("devices", {}).get("results", [])
                reserved = [r.get("uid") for r in status.get("reservedFor", [])]
                if (
                    len(results) != PER_POD
                    or {r["pool"] for r in results} != {node}
                    or pod["metadata"]["uid"] not in reserved
                ):
                    problems.append(f"{name} Running on {node} with claim {status}")
                seen_running[name] = node
            return len(pods) == PODS and all(p["status"].get("phase") == "Succeeded" for p in pods)

        poll(f"{PODS} pods Succeeded", watch, 300, 0.5)
        assert not problems
        assert len(seen_running) == PODS, f"pods never seen Running: {PODS - len(seen_running)}"
        assert all(node.startswith(f"{fleet}-") for node in seen_running.values())
        for pod in listed(kube, ns, "pods"):
            assert (terminated(pod)["exitCode"], terminated(pod)["reason"]) == (0, "Completed")
        poll("claims of the finished pods deleted", lambda: not listed(kube, ns, "claims"), 120, 0.5)


def test_kwok_failure_profile(bed: TestBed, kubeconfig: Path, kube: Kube, ns: str, tmp_path: Path) -> None:
    """failureFraction 1: every pod that can fail (restartPolicy Never) fails with the profile's exit
    code; an OnFailure pod (the kubelet restarts its failed containers) and a pod annotated to succeed
    succeed; a restartPolicy Always pod keeps running."""
    profile = WorkloadProfile(start_seconds=0.5, run_seconds=2, failure_fraction=1.0, exit_code=3)
    with kwok_fleet(bed, kubeconfig, tmp_path, profile) as fleet:
        kube.create(gpu_claim_template("gpus", 1), ns)
        failing = [f"fail-{i}" for i in range(4)]
        for name in failing:
            kube.create(fleet_pod(name, fleet), ns)
        kube.create(fleet_pod("on-failure", fleet, restart="OnFailure"), ns)
        kube.create(fleet_pod("told-to-succeed", fleet, annotations={OUTCOME_ANNOTATION: "Succeeded"}), ns)
        kube.create(fleet_pod("service", fleet, restart="Always"), ns)

        def finished() -> dict[str, dict[str, Any]] | None:
            pods = {p["metadata"]["name"]: p for p in listed(kube, ns, "pods")}
            done = [n for n in (*failing, "on-failure", "told-to-succeed") if n in pods]
            ok = len(done) == 6 and all(
                pods[n]["status"].get("phase") in ("Succeeded", "Failed") for n in done
            )
            return pods if ok else None

        pods = poll("the finite pods finished", finished, 180, 0.5)
        for name in failing:
            assert pods[name]["status"]["phase"] == "Failed", name
            assert (terminated(pods[name])["exitCode"], terminated(pods[name])["reason"]) == (3, "Error")
        for name in ("on-failure", "told-to-succeed"):
            assert pods[name]["status"]["phase"] == "Succeeded", name
        service = pods["service"]
        assert service["status"]["phase"] == "Running"
        assert service["spec"]["nodeName"].startswith(f"{fleet}-")
        # Deleted, it is gone at once: KWOK confirms the deletion as a kubelet does (left to the pod
        # garbage collector once its node is deleted, it would take 40 s more).
        kube.core.delete_namespaced_pod("service", ns)
        poll("the deleted pod removed", lambda: not kube.pod_exists(ns, "service"), 15, 0.5)  # grace: 30 s
