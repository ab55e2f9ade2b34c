"""The devices' entries in a ResourceClaim's `status.devices`, written by this driver with
server-side apply (field manager: the driver's name), as a driver that implements
DRAResourceClaimDeviceStatus does (docs/reference/kubernetes-dra.md#device-status).

One field manager owns this driver's entries: an apply names every entry (and condition) the
driver wants to keep on the claim, so a later apply carries over the conditions an earlier one set
(`merged`). Entries are keyed by driver, pool, device and shareID, as the API's list map.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from kubernetes import client

APPLY = "application/apply-patch+yaml"  # JSON is YAML


@dataclass(frozen=True)
class Condition:
    """A device condition as a driver sets it (metav1.Condition without its times)."""

    type: str
    status: Literal["True", "False"]
    reason: str
    message: str


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return (entry["driver"], entry["pool"], entry["device"], entry.get("shareID") or "")


def entry(result: Mapping[str, Any]) -> dict[str, Any]:
    """The status entry of one allocation result (no conditions yet)."""
    found: dict[str, Any] = {"driver": result["driver"], "pool": result["pool"], "device": result["device"]}
    if result.get("shareID"):
        found["shareID"] = result["shareID"]
    return found


def condition(cond: Condition, at: str, generation: int | None) -> dict[str, Any]:
    """A metav1.Condition."""
    found: dict[str, Any] = {
        "type": cond.type,
        "status": cond.status,
        "reason": cond.reason,
        "message": cond.message,
        "lastTransitionTime": at,
    }
    if generation:
        found["observedGeneration"] = generation
    return found


def with_conditions(
    entries: Iterable[dict[str, Any]], conditions: Sequence[Condition], claim: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """`entries` with `conditions` set; a condition whose status did not change keeps its time."""
    at, generation = now(), (claim.get("metadata") or {}).get("generation")
    existing = {key(e): e for e in (claim.get("status") or {}).get("devices") or []}
    out = []
    for e in entries:
        old = {c["type"]: c for c in existing.get(key(e), {}).get("conditions") or []}
        conds = []
        for cond in conditions:
            prior = old.get(cond.type)
            same = prior is not None and prior.get("status") == cond.status
            conds.append(condition(cond, prior["lastTransitionTime"] if same and prior else at, generation))
        out.append({**e, "conditions": conds})
    return out


def merged(entries: Iterable[dict[str, Any]], claim: Mapping[str, Any], driver: str) -> list[dict[str, Any]]:
    """`entries` plus what this driver already has on the claim (an apply names everything it
    keeps): conditions of the same entry that `entries` do not set, and entries it does not name."""
    ours = {key(e): e for e in (claim.get("status") or {}).get("devices") or [] if e.get("driver") == driver}
    out = []
    for e in entries:
        prior = ours.pop(key(e), None)
        if prior is not None:
            have = {c["type"] for c in e.get("conditions") or []}
            kept = [c for c in prior.get("conditions") or [] if c["type"] not in have]
            e = {**{k: v for k, v in prior.items() if k not in e}, **e}
            e["conditions"] = list(e.get("conditions") or []) + kept
        out.append(e)
    return out + list(ours.values())


def apply(
    api: client.ApiClient,
    claim: Mapping[str, Any],
    entries: list[dict[str, Any]],
    driver: str,
    version: str = "v1",
) -> dict[str, Any]:
    """Server-side apply of `entries` as this driver's part of the claim's status.devices."""
    from dra_fake.core.kube import send_json

    meta = claim["metadata"]
    for e in entries:
        e.setdefault("conditions", [])  # required by the API (may be empty)
    body = {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
        "status": {"devices": entries},
    }
    path = f"/apis/resource.k8s.io/{version}/namespaces/{{namespace}}/resourceclaims/{{name}}/status"
    query = {"field_manager": driver, "force": True}
    return send_json(api, "PATCH", path, body, APPLY, query, namespace=meta["namespace"], name=meta["name"])
