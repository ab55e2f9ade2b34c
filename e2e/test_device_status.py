"""Prepared devices' status in their claims (docs/prepare.md#device-status): once a pod runs, its
claim's status.devices holds our entry for each device, Ready, with the device's data (the UUID the
slice publishes; a MIG device's parent and profile), written with server-side apply under the
driver's field manager."""

from __future__ import annotations

from typing import Any

from e2e.conftest import published
from e2e.kube import Kube, poll
from e2e.workloads import pod, template

DRIVER = "gpu.nvidia.com"


def claim_of(kube: Kube, ns: str, pod_name: str) -> dict[str, Any]:
    p = kube.pod(ns, pod_name)
    return kube.claim(ns, p["status"]["resourceClaimStatuses"][0]["resourceClaimName"])


def status_entries(kube: Kube, ns: str, pod_name: str) -> list[dict[str, Any]] | None:
    devices = claim_of(kube, ns, pod_name).get("status", {}).get("devices") or []
    ours = [d for d in devices if d["driver"] == DRIVER]
    return ours or None


def test_a_running_pods_devices_are_ready_with_their_data(kube: Kube, ns: str, nodes: list[str]) -> None:
    kube.apply_yaml(template("gpu", DRIVER), ns)
    kube.apply_yaml(template("mig", "mig.nvidia.com"), ns)
    kube.create(pod("full", "gpu"), ns)
    kube.create(pod("part", "mig"), ns)
    for name in ("full", "part"):
        kube.wait_running(ns, name)
        [entry] = poll(f"{name}'s device status", lambda n=name: status_entries(kube, ns, n), 30)  # type: ignore[misc]
        claim = claim_of(kube, ns, name)
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (entry["pool"], entry["device"]) == (result["pool"], result["device"])
        assert [(c["type"], c["status"], c["reason"]) for c in entry["conditions"]] == [
            ("Ready", "True", "Prepared")
        ]
        attributes = published(kube, result["pool"])[result["device"]]["attributes"]
        data = entry["data"]
        if "uuid" in attributes:  # a dynamic MIG device has its UUID only once created
            assert data["uuid"] == attributes["uuid"]["string"]
        else:
            assert data["uuid"].startswith("MIG-")
        if name == "part":
            assert data["parentUUID"] == attributes["parentUUID"]["string"]
            assert data["profile"] == attributes["profile"]["string"]
        else:
            assert "parentUUID" not in data
        managers = {
            m["manager"]
            for m in claim["metadata"].get("managedFields") or []
            if m.get("subresource") == "status"
        }
        assert DRIVER in managers  # server-side apply under the driver's field manager
