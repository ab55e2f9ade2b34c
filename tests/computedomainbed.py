"""What the ComputeDomain tests (tests/test_computedomain*.py, tests/test_state.py) share: their
domain's UID and clique, its opaque parameters and claims, a fake API side and the claim state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from computedomain.plugin.domains import LABEL_OWNED, DomainRef, NodeOwnedError
from computedomain.plugin.state import ComputeDomainState

UID = "2f9c6a4e-0000-4000-8000-000000000001"

DRIVER_NAMESPACE = "dra-fake"
CLIQUE = "0b0f0c2d-6c67-4bba-9b6b-2a2f1e7ef7a1.32766"


def params(kind: str = "ComputeDomainChannelConfig", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind, "domainID": UID, **extra}


class FakeDomains:
    def __init__(self, namespace: str = "team", ready: bool = False) -> None:
        self.namespace = namespace
        self.ready = ready
        self.labels: dict[str, str] = {}

    def get_by_uid(self, uid: str) -> DomainRef | None:
        return DomainRef(uid, "cd", self.namespace) if uid == UID else None

    def add_node_label(self, node: str, uid: str) -> None:
        if self.labels.get(node, uid) != uid:
            raise NodeOwnedError(LABEL_OWNED)
        self.labels[node] = uid

    def remove_node_label(self, node: str, uid: str) -> bool:
        if self.labels.get(node) == uid:
            del self.labels[node]
            return True
        return False

    def node_ready(self, uid: str, clique_id: str, node: str) -> bool:
        return self.ready


def claim(device: str = "channel-0", namespace: str = "team", **cfg: Any) -> dict[str, Any]:
    kind = "ComputeDomainChannelConfig" if device == "channel-0" else "ComputeDomainDaemonConfig"
    request = "channel" if device == "channel-0" else "daemon"
    return {
        "metadata": {"uid": f"claim-{device}", "name": "c", "namespace": namespace},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": request,
                            "driver": "compute-domain.nvidia.com",
                            "pool": "node-1",
                            "device": device,
                        }
                    ],
                    "config": [
                        {
                            "source": "FromClaim",
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": params(kind, **cfg),
                            },
                        }
                    ],
                }
            }
        },
    }


def make_state(tmp_path: Path, domains: FakeDomains, clique: str = CLIQUE) -> ComputeDomainState:
    boot = tmp_path / "boot_id"
    boot.write_text("boot-1")
    return ComputeDomainState(
        "compute-domain.nvidia.com",
        "node-1",
        tmp_path / "cdi",
        tmp_path / "plugin",
        domains,
        clique,
        DRIVER_NAMESPACE,
        boot_id_path=boot,
    )
