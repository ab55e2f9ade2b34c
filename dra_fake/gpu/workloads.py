"""Who uses which device, and how hard: the pods on this node and the claims prepared here become
per-device users (pod, container, claim) with the load their pod asks to simulate. Pure.

A container uses a claim through `resources.claims` (a pod claim name, optionally one request),
which `spec.resourceClaims` / `status.resourceClaimStatuses` resolve to a ResourceClaim name, or
through the claim the scheduler made for its extended resources (`status.extendedResourceClaimStatus`).
This is the attribution dcgm-exporter makes from the kubelet's PodResources API
(docs/reference/dcgm-exporter-and-gfd.md#a3-kubernetes-pod-attribution-and-dra).

The load comes from pod annotations (docs/observability.md#simulated-load):

- `dra-fake.dev/simulated-gpu-utilization`: `"<percent>"` or `"<low>-<high>"`, e.g. `"60-90"`;
- `dra-fake.dev/simulated-gpu-memory`: `"<percent>%"` of the device's memory or a size in MiB
  (`"20480"`, `"20480Mi"`, `"20Gi"`).

A pod without them gets DEFAULT_LOAD. Any pod on the node may carry them (in any namespace, with or
without a GPU), so they are bounded: at most MAX_ANNOTATION_LENGTH characters, a size of at most
MAX_MEMORY_MIB. A malformed annotation, or a pod that cannot be read at all, is reported (the
message names it; the monitor posts an Event on the pod) and that pod alone gets the default: one
pod's typo or hostile value does not stop the node's metrics for the others.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dra_fake.core.opaque import main_request

ANNOTATION_UTILIZATION = "dra-fake.dev/simulated-gpu-utilization"
ANNOTATION_MEMORY = "dra-fake.dev/simulated-gpu-memory"

MAX_ANNOTATION_LENGTH = 64  # characters of one annotation's value; "20480Mi" needs 7
MAX_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB: more than any GPU has; the device's memory caps it anyway

_RANGE = re.compile(r"^\s*(\d{1,3})\s*(?:-\s*(\d{1,3})\s*)?$")
_PERCENT = re.compile(r"^\s*(\d{1,3}(?:\.\d{1,6})?)\s*%\s*$")
_SIZE = re.compile(r"^\s*(\d{1,9})\s*(Mi|Gi|Ti)?\s*$")
_UNIT_MIB = {None: 1, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}


@dataclass(frozen=True)
class Load:
    """What a pod's work does to each device it holds."""

    utilization: tuple[int, int]  # percent, low..high; the value moves within it
    memory_fraction: float | None = None  # of the device's memory ...
    memory_mib: int | None = None  # ... or an absolute size (exactly one is set)


# A device held by a pod that says nothing: a busy job, half the memory (docs/observability.md).
DEFAULT_LOAD = Load(utilization=(80, 100), memory_fraction=0.5)


class LoadError(ValueError):
    """A simulated-load annotation that cannot be read; the message names it."""


def _annotation(annotations: Mapping[str, str], name: str) -> str | None:
    raw = annotations.get(name)
    if raw is not None and (not isinstance(raw, str) or len(raw) > MAX_ANNOTATION_LENGTH):
        raise LoadError(f"annotation {name}: not a string of at most {MAX_ANNOTATION_LENGTH} characters")
    return raw


def parse_load(annotations: Mapping[str, str] | None) -> Load:
    annotations = annotations or {}
    if not isinstance(annotations, Mapping):
        raise LoadError(f"annotations: not a map but {type(annotations).__name__}")
    utilization = DEFAULT_LOAD.utilization
    raw = _annotation(annotations, ANNOTATION_UTILIZATION)
    if raw is not None:
        m = _RANGE.match(raw)
        low, high = (int(m[1]), int(m[2] or m[1])) if m else (-1, -1)
        if not (0 <= low <= high <= 100):
            raise LoadError(
                f"annotation {ANNOTATION_UTILIZATION}: {raw!r} is not a percentage or a range of "
                "percentages like '60-90' (0 to 100, low first)"
            )
        utilization = (low, high)
    raw = _annotation(annotations, ANNOTATION_MEMORY)
    if raw is None:
        return Load(utilization, DEFAULT_LOAD.memory_fraction)
    if m := _PERCENT.match(raw):
        if float(m[1]) > 100:
            raise LoadError(f"annotation {ANNOTATION_MEMORY}: {raw!r} is more than 100%")
        return Load(utilization, memory_fraction=float(m[1]) / 100)
    if m := _SIZE.match(raw):
        mib = int(m[1]) * _UNIT_MIB[m[2]]
        if mib > MAX_MEMORY_MIB:
            raise LoadError(f"annotation {ANNOTATION_MEMORY}: {raw!r} is more than 16Ti")
        return Load(utilization, memory_mib=mib)
    raise LoadError(
        f"annotation {ANNOTATION_MEMORY}: {raw!r} is neither a percentage ('40%') nor a size in MiB "
        "('20480', '20480Mi', '20Gi')"
    )


@dataclass(frozen=True)
class HeldDevice:
    """A device of a prepared claim."""

    name: str  # the published device name
    pool: str
    requests: tuple[str, ...]  # the claim requests it was allocated for ("req" or "req/subrequest")
    uuid: str | None = None  # a dynamic MIG device's UUID (created for this claim)
    share_id: str | None = None  # allocated as a share of a shared device
    share_memory_mib: int | None = None  # the share's memory view (None: the device's)


@dataclass(frozen=True)
class ClaimHolding:
    """A claim prepared on this node (PrepareCompleted)."""

    namespace: str
    name: str
    devices: tuple[HeldDevice, ...]


@dataclass(frozen=True)
class User:
    """One container using one device through one claim."""

    pod: str
    namespace: str
    pod_uid: str
    container: str
    claim_name: str  # in the pod's namespace
    device: HeldDevice
    load: Load


def users_by_device(
    pods: Iterable[Mapping[str, Any]], claims: Iterable[ClaimHolding]
) -> tuple[dict[str, list[User]], dict[str, str]]:
    """Device name -> its users (sorted by namespace, pod, container), and pod (ns/name) -> the
    error of a simulated-load annotation that could not be read."""
    held = {(c.namespace, c.name): c for c in claims}
    users: dict[str, list[User]] = {}
    errors: dict[str, str] = {}
    for pod in pods:
        try:
            for device_name, user in _pod_users(pod, held, errors):
                users.setdefault(device_name, []).append(user)
        except Exception as err:  # whatever one pod holds, it costs only that pod
            message = f"pod not understood: {type(err).__name__}: {err}"
            errors[_pod_key(pod)] = " ".join(message.split())[:512]
    for entries in users.values():
        entries.sort(key=lambda u: (u.namespace, u.pod, u.container, u.claim_name))
    return users, errors


def _pod_key(pod: Any) -> str:
    """ "namespace/name" of a pod, whatever its shape."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    if not isinstance(meta, Mapping):
        return "?/?"
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _pod_users(
    pod: Mapping[str, Any], held: Mapping[tuple[str, str], ClaimHolding], errors: dict[str, str]
) -> list[tuple[str, User]]:
    """(device name, user) of one pod; all of them or (raising) none."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):  # its containers are gone
        return []
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    try:
        load = parse_load(meta.get("annotations"))
    except LoadError as err:
        errors[_pod_key(pod)] = str(err)
        load = DEFAULT_LOAD
    out: list[tuple[str, User]] = []
    for container, claim_name, request in _container_claims(pod):
        claim = held.get((namespace, claim_name))
        if claim is None:
            continue
        for device in claim.devices:
            if request is not None and request not in {main_request(r) for r in device.requests}:
                continue
            user = User(name, namespace, meta.get("uid", ""), container, claim_name, device, load)
            out.append((device.name, user))
    return out


def _container_claims(pod: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
    """(container, ResourceClaim name, request or None for all) of the pod's containers."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    names: dict[str, str] = {}
    for entry in spec.get("resourceClaims") or []:
        if entry.get("resourceClaimName"):
            names[entry["name"]] = entry["resourceClaimName"]
    for entry in status.get("resourceClaimStatuses") or []:
        if entry.get("resourceClaimName"):
            names[entry["name"]] = entry["resourceClaimName"]
    out: list[tuple[str, str, str | None]] = []
    for container in spec.get("containers") or []:
        for ref in (container.get("resources") or {}).get("claims") or []:
            if ref.get("name") in names:
                out.append((container["name"], names[ref["name"]], ref.get("request") or None))
    extended = status.get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName"):
        for mapping in extended.get("requestMappings") or []:
            out.append((mapping["containerName"], extended["resourceClaimName"], mapping["requestName"]))
    return out
