"""Simulated GPU faults (GpuFault objects) and what NVIDIA's driver makes of them: device taints
and device health. Pure: objects in, effects out; dra_fake.gpu.faultwatch does the I/O.

NVIDIA's gpu-kubelet-plugin, with its NVMLDeviceHealthCheck gate, turns NVML events into device
taints (docs/reference/nvidia-gpu-driver.md#35-health-taints): an Xid critical error taints the device
`gpu.nvidia.com/xid=<xid>` (effect None for the Xids it ignores), a lost GPU taints every device
`gpu.nvidia.com/gpu-lost`, and a device it cannot watch gets `gpu.nvidia.com/unmonitored`.
NVIDIA keeps a taint until the plugin restarts (recovery `sticky`, our default); recovery `clear`
removes it when the fault ends. The user-facing contract is docs/faults.md.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dra_fake.gpu.devices import AllocatableDevice

GROUP = "dra-fake.dev"
VERSION = "v1alpha1"
PLURAL = "gpufaults"
KIND = "GpuFault"

KINDS = ("xid", "gpu-lost", "ecc", "thermal", "unmonitored")
RECOVERIES = ("sticky", "clear")
EFFECTS = ("NoSchedule", "NoExecute", "None")
ECC_TYPES = ("single", "double")

TAINT_XID = "gpu.nvidia.com/xid"
TAINT_GPU_LOST = "gpu.nvidia.com/gpu-lost"
TAINT_UNMONITORED = "gpu.nvidia.com/unmonitored"
# Xids NVIDIA's plugin treats as application errors, not device faults (effect None).
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
XID_DOUBLE_BIT_ECC = 48  # NVIDIA reports an uncorrectable (double-bit) ECC error as Xid 48
XID_FALLEN_OFF_BUS = 79  # the driver's Xid for a GPU that fell off the bus (NVIDIA's Xid catalog)
MAX_XID = 1 << 16

Phase = Literal["Pending", "Active", "Recovered", "Failed"]
UNHEALTHY, UNKNOWN = "Unhealthy", "Unknown"  # as the kubelet writes them (devices not named: Healthy)


class FaultError(ValueError):
    """A GpuFault this plugin cannot apply; the message names the field."""


@dataclass(frozen=True)
class Fault:
    name: str
    node: str
    device: str  # as written: a device name, a GPU UUID or a MIG device UUID
    kind: str
    starts_at: float  # Unix seconds: creation + startAfterSeconds
    ends_at: float | None  # None: until the object is deleted
    recovery: str = "sticky"
    effect: str | None = None  # overrides the taint effect NVIDIA would use
    xid: int | None = None
    ecc_type: str = "double"
    ecc_count: int = 1
    temperature: int = 0

    def phase(self, now: float) -> Phase:
        if now < self.starts_at:
            return "Pending"
        if self.ends_at is not None and now >= self.ends_at:
            return "Recovered"
        return "Active"

    def next_change(self, now: float) -> float | None:
        """When the phase changes next (None: not by time)."""
        if now < self.starts_at:
            return self.starts_at
        if self.ends_at is not None and now < self.ends_at:
            return self.ends_at
        return None


def _field(spec: Mapping[str, Any], name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    value = spec.get(name, default)
    if value is not None and (not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)):
        raise FaultError(f"spec.{name}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def parse_fault(obj: Mapping[str, Any]) -> Fault:
    """A GpuFault object -> Fault, or FaultError naming the offending field."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise FaultError("spec: missing")
    node = _field(spec, "nodeName", str) or ""
    device = _field(spec, "device", str) or ""
    if not node:
        raise FaultError("spec.nodeName: required")
    if not device:
        raise FaultError("spec.device: required (a device name, GPU UUID or MIG device UUID)")
    kind = _field(spec, "kind", str)
    if kind not in KINDS:
        raise FaultError(f"spec.kind: {kind!r} is not one of {', '.join(KINDS)}")
    recovery = _field(spec, "recovery", str, "sticky")
    if recovery not in RECOVERIES:
        raise FaultError(f"spec.recovery: {recovery!r} is not one of {', '.join(RECOVERIES)}")
    effect = _field(spec, "effect", str)
    if effect is not None and effect not in EFFECTS:
        raise FaultError(f"spec.effect: {effect!r} is not one of {', '.join(EFFECTS)}")
    start_after = _field(spec, "startAfterSeconds", int, 0)
    duration = _field(spec, "durationSeconds", int)
    if start_after < 0:
        raise FaultError("spec.startAfterSeconds: must be >= 0")
    if duration is not None and duration <= 0:
        raise FaultError(
            "spec.durationSeconds: must be > 0 (leave it out for a fault that lasts until deleted)"
        )
    created = _timestamp(meta.get("creationTimestamp"))
    starts = created + start_after
    xid = _field(spec, "xid", int)
    if kind == "xid" and (xid is None or not 0 < xid < MAX_XID):
        raise FaultError(f"spec.xid: kind xid needs an Xid number between 1 and {MAX_XID - 1}, got {xid!r}")
    ecc = _field(spec, "ecc", Mapping) or {}
    ecc_type = ecc.get("type", "double")
    ecc_count = ecc.get("count", 1)
    if ecc_type not in ECC_TYPES:
        raise FaultError(f"spec.ecc.type: {ecc_type!r} is not one of {', '.join(ECC_TYPES)}")
    if not isinstance(ecc_count, int) or isinstance(ecc_count, bool) or not 0 < ecc_count < 1 << 31:
        raise FaultError(f"spec.ecc.count: expected a positive integer, got {ecc_count!r}")
    thermal = _field(spec, "thermal", Mapping) or {}
    temperature = thermal.get("temperature", 95)
    if not isinstance(temperature, int) or isinstance(temperature, bool) or not 0 <= temperature <= 200:
        raise FaultError(
            f"spec.thermal.temperature: expected degrees C between 0 and 200, got {temperature!r}"
        )
    return Fault(
        name=str(meta.get("name", "")),
        node=node,
        device=device,
        kind=kind,
        starts_at=starts,
        ends_at=starts + duration if duration else None,
        recovery=recovery,
        effect=effect,
        xid=xid,
        ecc_type=ecc_type,
        ecc_count=ecc_count,
        temperature=temperature,
    )


def _timestamp(raw: Any) -> float:
    if isinstance(raw, datetime.datetime):  # the Kubernetes client's deserialised form
        return raw.timestamp()
    if isinstance(raw, str) and raw:
        return datetime.datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    raise FaultError("metadata.creationTimestamp: missing (not an object read from the API server)")


def rfc3339(ts: float) -> str:
    """Seconds precision, as the API server stores metav1.Time."""
    return datetime.datetime.fromtimestamp(int(ts), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- targets and effects ------------------------------------------------------------------------


def find_target(fault: Fault, devices: Mapping[str, AllocatableDevice]) -> AllocatableDevice:
    """The device a fault names: by device name, GPU UUID or MIG device UUID. A GPU in MIG mode
    publishes no device of its own: its UUID then names the GPU as a whole, which only a lost or
    unmonitored GPU can use (an Xid names one device)."""
    target = devices.get(fault.device) or next((d for d in devices.values() if d.uuid == fault.device), None)
    if target is not None:
        return target
    on_gpu = sorted((d for d in devices.values() if d.gpu_uuid == fault.device), key=lambda d: d.name)
    if on_gpu and fault.kind in ("gpu-lost", "unmonitored"):
        return on_gpu[0]
    if on_gpu:
        raise FaultError(
            f"spec.device: GPU {fault.device} is in MIG mode and publishes no device of its own; "
            f"name one of its MIG devices ({', '.join(d.name for d in on_gpu)})"
        )
    raise FaultError(
        f"spec.device: {fault.device!r} is not a device of node {fault.node} "
        "(a device name such as gpu-0, a GPU UUID or a MIG device UUID)"
    )


def affected(
    fault: Fault, target: AllocatableDevice, devices: Mapping[str, AllocatableDevice]
) -> tuple[list[str], list[str]]:
    """(devices NVIDIA taints, devices whose health the fault changes), by name; `target` is
    find_target's answer.

    As NVIDIA's plugin: an Xid hits the one device the event names (a full GPU's Xid does not
    spread to its MIG devices); a lost GPU taints every device of every GPU (the plugin cannot
    tell which GPU is gone); an unwatchable GPU is unmonitored with all its devices. Health is the
    truth of the simulated hardware: a lost GPU's own devices, not its neighbours."""
    on_gpu = sorted(d.name for d in devices.values() if d.minor == target.minor)
    if fault.kind == "gpu-lost":
        return sorted(devices), on_gpu
    if fault.kind == "unmonitored":
        return on_gpu, on_gpu
    return [target.name], [target.name]


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str
    since: float

    def manifest(self) -> dict[str, str]:
        """As in a ResourceSlice. timeAdded is set here (NVIDIA leaves it to the API server):
        the publisher compares what it sends with what is stored, and a server-filled field
        would differ on every sync."""
        out = {"key": self.key, "effect": self.effect, "timeAdded": rfc3339(self.since)}
        if self.value:
            out["value"] = self.value
        return out


def fault_taint(fault: Fault, ignored_xids: frozenset[int]) -> Taint | None:
    """The taint NVIDIA's plugin puts on the devices a fault hits (None: no taint)."""
    key, value, effect = "", "", "NoSchedule"
    if fault.kind == "xid":
        key, value = TAINT_XID, str(fault.xid)
        effect = "None" if fault.xid in ignored_xids else "NoSchedule"
    elif fault.kind == "ecc" and fault.ecc_type == "double":
        # NVIDIA's plugin drops the NVML ECC events themselves; the driver reports an uncorrectable
        # error as Xid 48 too, and that Xid event is what taints the device.
        key, value = TAINT_XID, str(XID_DOUBLE_BIT_ECC)
    elif fault.kind == "gpu-lost":
        key = TAINT_GPU_LOST
    elif fault.kind == "unmonitored":
        key, effect = TAINT_UNMONITORED, "None"
    else:
        return None  # thermal, single-bit ECC: shown by nvidia-smi, not a device fault
    return Taint(key, value, fault.effect or effect, fault.starts_at)


def fault_health(fault: Fault, ignored_xids: frozenset[int]) -> tuple[str, str] | None:
    """(health, message) the kubelet's health stream reports for the devices (None: Healthy)."""
    if fault.kind == "xid" and fault.xid not in ignored_xids:
        return UNHEALTHY, f"Xid {fault.xid} (GpuFault {fault.name})"
    if fault.kind == "ecc" and fault.ecc_type == "double":
        return UNHEALTHY, f"{fault.ecc_count} uncorrectable ECC error(s), Xid 48 (GpuFault {fault.name})"
    if fault.kind == "gpu-lost":
        return UNHEALTHY, f"GPU is lost (GpuFault {fault.name})"
    if fault.kind == "unmonitored":
        return UNKNOWN, f"GPU health is not monitored (GpuFault {fault.name})"
    return None


TAINT_EFFECT_NONE_SINCE = (1, 35)  # servers before 1.35 reject a device taint with effect None


def servable_taints(
    taints: Mapping[str, list[dict[str, str]]], server_version: tuple[int, int]
) -> dict[str, list[dict[str, str]]]:
    """The taints a server of this version accepts (effect None only from 1.35)."""
    if server_version >= TAINT_EFFECT_NONE_SINCE:
        return dict(taints)
    return {d: kept for d, ts in taints.items() if (kept := [t for t in ts if t["effect"] != "None"])}


@dataclass
class Effects:
    taints: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # device name -> taints
    # device name -> (health, why); devices not named are Healthy
    health: dict[str, tuple[str, str]] = field(default_factory=dict)
    # GPU UUID -> what its nvidia-smi shows while faults are active (add_gpu_state); healthy GPUs absent
    gpus: dict[str, dict[str, int]] = field(default_factory=dict)


def add_gpu_state(state: dict[str, int], fault: Fault) -> None:
    """What an active fault does to its GPU as nvidia-smi and DCGM report it: lost, ECC counters
    (volatile, summed), temperature (the hottest fault), and the Xid the driver logged (the latest
    fault's; DCGM_FI_DEV_XID_ERRORS, docs/reference/dcgm-exporter-and-gfd.md#a4-value-semantics)
    with `xid_seq`, which grows with each new Xid event (faults come here in start order)."""
    if fault.kind == "gpu-lost":
        state["lost"] = 1
        _set_xid(state, XID_FALLEN_OFF_BUS, fault)
    elif fault.kind == "xid" and fault.xid is not None:
        _set_xid(state, fault.xid, fault)
    elif fault.kind == "ecc":
        key = "ecc_dbe" if fault.ecc_type == "double" else "ecc_sbe"
        state[key] = state.get(key, 0) + fault.ecc_count
        if fault.ecc_type == "double":
            _set_xid(state, XID_DOUBLE_BIT_ECC, fault)
    elif fault.kind == "thermal":
        state["temperature"] = max(state.get("temperature", 0), fault.temperature)


def _set_xid(state: dict[str, int], xid: int, fault: Fault) -> None:
    """The Xid event and its sequence number: the start time in milliseconds, the same in every
    plugin process (a restart delivers no event twice, docs/nvml.md `fault_xid_seq`)."""
    state["xid"] = xid
    state["xid_seq"] = max(state.get("xid_seq", 0), round(fault.starts_at * 1000))


_SEVERITY = {UNHEALTHY: 2, UNKNOWN: 1}


class FaultTracker:
    """This node's faults -> effects, with NVIDIA's stickiness: what a `sticky` fault did stays
    until the plugin restarts (a new tracker), even after the fault ends or is deleted."""

    def __init__(self, devices: Mapping[str, AllocatableDevice], ignored_xids: frozenset[int]) -> None:
        self.devices = devices
        self.ignored_xids = ignored_xids
        # fault name -> what it did, kept for sticky faults once active
        self._latched: dict[str, tuple[list[str], list[str], Taint | None, tuple[str, str] | None]] = {}

    def effects(self, faults: Iterable[Fault], now: float) -> tuple[Effects, dict[str, tuple[Phase, str]]]:
        """Effects of the faults at `now`, and each fault's phase and status message."""
        status: dict[str, tuple[Phase, str]] = {}
        gpus: dict[str, dict[str, int]] = {}
        active = dict(self._latched)
        for fault in sorted(faults, key=lambda f: (f.starts_at, f.name)):
            try:
                target = find_target(fault, self.devices)
                tainted, unhealthy = affected(fault, target, self.devices)
            except FaultError as err:
                status[fault.name] = ("Failed", str(err))
                continue
            phase = fault.phase(now)
            where = ", ".join(unhealthy)
            if phase == "Active":
                add_gpu_state(gpus.setdefault(target.gpu_uuid, {}), fault)
                hit = (
                    tainted,
                    unhealthy,
                    fault_taint(fault, self.ignored_xids),
                    fault_health(fault, self.ignored_xids),
                )
                active[fault.name] = hit
                if fault.recovery == "sticky":
                    self._latched.setdefault(fault.name, hit)
                status[fault.name] = ("Active", f"on {where}")
            elif phase == "Pending":
                status[fault.name] = ("Pending", f"starts at {rfc3339(fault.starts_at)} on {where}")
            else:
                kept = fault.name in self._latched and self._latched[fault.name][2] is not None
                status[fault.name] = (
                    "Recovered",
                    "ended; its taint stays until the plugin restarts (recovery: sticky)"
                    if kept
                    else "ended",
                )
        effects = _combine(active.values())
        effects.gpus = {uuid: state for uuid, state in gpus.items() if state}
        return effects, status


def _combine(hits: Iterable[tuple[list[str], list[str], Taint | None, tuple[str, str] | None]]) -> Effects:
    """One taint per key per device, the latest winning (NVIDIA's AddOrUpdateTaint); the worst
    health per device."""
    by_key: dict[str, dict[str, Taint]] = {}
    out = Effects()
    for tainted, unhealthy, taint, health in sorted(hits, key=lambda h: h[2].since if h[2] else 0.0):
        if taint is not None:
            for name in tainted:
                by_key.setdefault(name, {})[taint.key] = taint
        if health is not None:
            for name in unhealthy:
                old = out.health.get(name)
                if old is None or _SEVERITY[health[0]] > _SEVERITY[old[0]]:
                    out.health[name] = health
    out.taints = {
        name: [t.manifest() for _, t in sorted(keys.items())] for name, keys in sorted(by_key.items())
    }
    return out
