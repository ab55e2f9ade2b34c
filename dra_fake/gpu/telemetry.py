"""Simulated GPU readings: what DCGM (and nvidia-smi) would read from each GPU and GPU instance
at a point in time. Pure, given a clock: inventory + who uses what (dra_fake.gpu.workloads) +
active faults in, one Reading per entity out.

How values move (docs/observability.md#how-the-values-move):
- an idle GPU reads as its profile's idle capture (power, temperature, clocks, nothing used);
- a used device's utilization is drawn every SAMPLE_PERIOD from each pod's range (deterministic:
  a hash of device, pod and period), summed over the pods sharing it, capped at 100; memory used is
  the sum of what the pods ask for, capped at what the device has;
- power, temperatures and the SM and video clocks follow the GPU's utilization between the
  profile's idle and limit figures; the energy counter integrates power and never goes back;
- faults: a lost GPU reads nothing but its Xid, a thermal fault sets the temperature and throttles
  the SM clock, the last Xid stays after recovery (as DCGM's).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dra_fake.gpu.devicefile import gi_instance_id, nvidia_bus_id
from dra_fake.gpu.inventory import Inventory, PhysicalGpu
from dra_fake.gpu.workloads import Load, User

SAMPLE_PERIOD = 5.0  # seconds a drawn utilization holds
POWER_AT_FULL_LOAD = 0.9  # of the power limit, at 100 % utilization
TEMPERATURE_RISE_C = 40  # GPU temperature above idle at 100 % utilization
MEMORY_TEMPERATURE_RISE_C = 30
THROTTLED_SM_CLOCK = 0.6  # of the maximum, under a thermal fault (HW slowdown)
MEMORY_UTIL_SHARE = 0.4  # memory-interface utilization per unit of GPU utilization
TENSOR_SHARE = 0.5  # tensor-pipe activity per unit of graphics-engine activity
PCIE_IDLE_BYTES = 40_000  # bytes/s of housekeeping traffic
PCIE_FULL_BYTES = 1_500_000_000  # bytes/s at 100 % utilization
NVLINK_FULL_RATE = 100_000  # counter increments per second at 100 % utilization
MAX_INTEGRATION_S = 60.0  # a longer gap (suspended process) integrates as this long
NO_ROW_REMAPPING = frozenset({"Turing"})  # NVML reports row remapping as N/A on these (t4 capture)


@dataclass(frozen=True)
class Entity:
    """What DCGM reports on: a GPU, or one GPU instance of a GPU with MIG on."""

    device: str  # the published device name
    gpu: PhysicalGpu
    memory_mib: int
    mig_profile: str = ""  # "" for a GPU
    gi_id: int = 0
    mig_uuid: str = ""
    slices: int = 0  # memory slices of the GPU instance

    @property
    def is_mig(self) -> bool:
        return bool(self.mig_profile)

    @property
    def uuid(self) -> str:
        return self.mig_uuid or self.gpu.uuid

    @property
    def bus_id(self) -> str:
        return nvidia_bus_id(self.gpu.pci_bus_id)

    @property
    def reserved_mib(self) -> int:
        """Framebuffer the driver keeps (a GPU instance's memory is all usable)."""
        return 0 if self.is_mig else self.gpu.profile.telemetry.fb_reserved_mib


@dataclass(frozen=True)
class Reading:
    """One entity's values at one sample; None = not reported (DCGM's blank value)."""

    lost: bool = False
    xid: int = 0
    gpu_util: int | None = None
    mem_copy_util: int | None = None
    enc_util: int | None = None
    dec_util: int | None = None
    fb_used: int | None = None
    fb_free: int | None = None
    fb_reserved: int | None = None
    power_w: float | None = None
    energy_mj: int | None = None
    gpu_temp: int | None = None
    memory_temp: int | None = None
    sm_clock: int | None = None
    mem_clock: int | None = None
    video_clock: int | None = None
    pcie_replay: int | None = None
    nvlink_total: int | None = None
    vgpu_license: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_correctable: int | None = None
    row_remap_failure: int | None = None
    gr_engine_active: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    pcie_tx_bytes: int | None = None
    pcie_rx_bytes: int | None = None


def entities(inventory: Inventory, dynamic_migs: Mapping[str, str]) -> list[Entity]:
    """The node's entities in DCGM's order (GPU index, then GI ID). `dynamic_migs`: device name ->
    UUID of the dynamic MIG devices that exist now (prepared claims)."""
    out: list[Entity] = []
    for gpu in sorted(inventory.gpus, key=lambda g: g.index):
        instances: list[Entity] = []
        for device in inventory.devices_of(gpu):
            if device.kind != "mig" or device.mig is None:
                continue
            uuid = dynamic_migs.get(device.name) if device.dynamic else device.uuid
            if uuid is None:
                continue
            instances.append(
                Entity(
                    device.name,
                    gpu,
                    device.memory_bytes >> 20,
                    device.mig.profile,
                    gi_instance_id(device.mig.size, device.mig.start),
                    uuid,
                    device.mig.size,
                )
            )
        if instances:
            out += sorted(instances, key=lambda e: e.gi_id)
        else:
            out.append(Entity(gpu.name, gpu, gpu.profile.memory_mib))
    return out


def draw(low: int, high: int, *key: str) -> int:
    """A value in [low, high], fixed for the key (deterministic across processes)."""
    if high <= low:
        return low
    digest = hashlib.blake2b("\0".join(key).encode(), digest_size=8).digest()
    return low + int.from_bytes(digest, "big") % (high - low + 1)


def _memory_mib(load: Load, capacity: int) -> int:
    if load.memory_mib is not None:
        return load.memory_mib
    return round(capacity * (load.memory_fraction or 0.0))


@dataclass
class _GpuCounters:
    energy_mj: float
    last_sample: float
    nvlink: float = 0.0
    xid: int = 0


@dataclass
class Simulator:
    """Readings over time; keeps the counters (energy, NVLink traffic) and the last Xid per GPU."""

    inventory: Inventory
    boot_time: float  # the node's boot (energy counts from there, at idle power, until restored)
    _counters: dict[str, _GpuCounters] = field(default_factory=dict)

    def restore(self, gpu_uuid: str, energy_mj: int, at: float) -> None:
        """The energy counter an earlier process left (the plugin restarted): it carries on, as
        the driver's does. The last Xid does not: DCGM forgets it when it restarts."""
        self._counters[gpu_uuid] = _GpuCounters(float(energy_mj), at)

    def energy_mj(self, gpu_uuid: str) -> int:
        c = self._counters.get(gpu_uuid)
        return 0 if c is None else int(c.energy_mj)

    def sample(
        self,
        now: float,
        users: Mapping[str, list[User]],
        faults: Mapping[str, Mapping[str, int]],
        dynamic_migs: Mapping[str, str],
    ) -> list[tuple[Entity, Reading]]:
        """All entities' readings at `now`. `faults`: GPU UUID -> its fault state
        (dra_fake.gpu.faults.Effects.gpus)."""
        period = str(int(now // SAMPLE_PERIOD))
        found = entities(self.inventory, dynamic_migs)
        by_gpu: dict[str, list[Entity]] = {}
        for entity in found:
            by_gpu.setdefault(entity.gpu.uuid, []).append(entity)
        out: list[tuple[Entity, Reading]] = []
        for gpu_uuid, parts in by_gpu.items():
            gpu = parts[0].gpu
            state = faults.get(gpu_uuid, {})
            loads = {e.device: self._load(e, users.get(e.device, []), period) for e in parts}
            if parts[0].is_mig:
                total = gpu.profile.mig_memory_slices or 8
                util = round(sum(loads[e.device][0] * e.slices for e in parts) / total)
            else:
                util = loads[parts[0].device][0]
            shared = self._gpu_values(gpu, util, state, now)
            for entity in parts:
                out.append((entity, self._reading(entity, loads[entity.device], shared)))
        return out

    def _load(self, entity: Entity, users: Iterable[User], period: str) -> tuple[int, int]:
        """(utilization %, memory MiB used) of one entity: its shares' and other users' together."""
        users = list(users)
        pods: dict[str, Load] = {}
        for user in users:
            pods.setdefault(user.pod_uid, user.load)
        util = sum(draw(*load.utilization, entity.uuid, uid, period) for uid, load in pods.items())
        usable = entity.memory_mib - entity.reserved_mib
        memory = sum(u.memory_used_mib for u in _shares(entity, users, period, usable))
        return min(util, 100), max(0, min(memory, usable))

    def share_uses(
        self, now: float, users: Mapping[str, list[User]], dynamic_migs: Mapping[str, str]
    ) -> list[ShareUse]:
        """Each share's own usage at `now` (what its nvidia-smi shows: docs/nvml.md#shares), from
        the same draws as `sample`."""
        period = str(int(now // SAMPLE_PERIOD))
        out: list[ShareUse] = []
        for entity in entities(self.inventory, dynamic_migs):
            usable = entity.memory_mib - entity.reserved_mib
            found = _shares(entity, users.get(entity.device, []), period, usable)
            out += [u for u in found if u.share_id is not None]
        return out

    def _gpu_values(self, gpu: PhysicalGpu, util: int, state: Mapping[str, int], now: float) -> Reading:
        """The device-level values every entity of the GPU reports."""
        t = gpu.profile.telemetry
        counters = self._counters.get(gpu.uuid)
        if counters is None:
            counters = _GpuCounters(t.power_idle_w * max(0.0, now - self.boot_time) * 1000, now)
            self._counters[gpu.uuid] = counters
        if "xid" in state:
            counters.xid = state["xid"]
        if state.get("lost"):
            counters.last_sample = now
            return Reading(lost=True, xid=counters.xid)
        busy = util / 100
        power = t.power_idle_w + (POWER_AT_FULL_LOAD * t.power_limit_w - t.power_idle_w) * busy
        elapsed = min(max(0.0, now - counters.last_sample), MAX_INTEGRATION_S)
        counters.energy_mj += power * elapsed * 1000
        if t.nvlink:
            counters.nvlink += NVLINK_FULL_RATE * busy * elapsed
        counters.last_sample = now
        hot = state.get("temperature")
        sm_clock = t.sm_clock_max_mhz if util else t.sm_clock_idle_mhz
        video_clock = (t.video_clock_max_mhz or t.video_clock_idle_mhz) if util else t.video_clock_idle_mhz
        if hot:
            sm_clock = round(t.sm_clock_max_mhz * THROTTLED_SM_CLOCK)
        remap = None if gpu.profile.architecture in NO_ROW_REMAPPING else 0
        return Reading(
            xid=counters.xid,
            power_w=round(power, 3),
            energy_mj=int(counters.energy_mj),
            gpu_temp=hot or t.temperature_idle_c + round(TEMPERATURE_RISE_C * busy),
            memory_temp=None
            if t.memory_temperature_idle_c is None
            else t.memory_temperature_idle_c + round(MEMORY_TEMPERATURE_RISE_C * busy),
            sm_clock=sm_clock,
            mem_clock=t.memory_clock_mhz,
            video_clock=video_clock,
            pcie_replay=0,
            nvlink_total=int(counters.nvlink) if t.nvlink else None,
            vgpu_license=0,
            remapped_rows_uncorrectable=remap,
            remapped_rows_correctable=remap,
            row_remap_failure=remap,
        )

    @staticmethod
    def _reading(entity: Entity, load: tuple[int, int], shared: Reading) -> Reading:
        if shared.lost:
            return shared
        util, used = load
        reserved = entity.reserved_mib
        busy = util / 100
        mem_util = round(util * MEMORY_UTIL_SHARE)
        pcie = PCIE_IDLE_BYTES + round(PCIE_FULL_BYTES * busy)
        # DCGM reports no engine utilization for GPU instances (use the PROF_ ratios there).
        engine = (lambda value: None) if entity.is_mig else (lambda value: value)
        return dataclasses.replace(
            shared,
            gpu_util=engine(util),
            mem_copy_util=engine(mem_util),
            enc_util=engine(0),
            dec_util=engine(0),
            fb_used=used,
            fb_free=entity.memory_mib - reserved - used,
            fb_reserved=reserved,
            gr_engine_active=round(busy, 6),
            tensor_active=round(busy * TENSOR_SHARE, 6),
            dram_active=round(mem_util / 100, 6),
            pcie_tx_bytes=pcie,
            pcie_rx_bytes=pcie,
        )


@dataclass(frozen=True)
class ShareUse:
    """The usage of one share of a device (share_id None: the device's users without a share)."""

    share_id: str | None
    device: str
    utilization: int  # percent, its pods' draws summed, capped at 100
    memory_used_mib: int  # capped at its view
    memory_mib: int | None  # its view (None: the device's)


def _shares(entity: Entity, users: Iterable[User], period: str, usable: int) -> list[ShareUse]:
    """An entity's users grouped by share: a pod's memory percentage is of its share's view, and a
    share's memory is capped at its view (the device's usable memory without one)."""
    groups: dict[str | None, tuple[int | None, dict[str, Load]]] = {}
    for user in users:
        view = user.device.share_memory_mib
        groups.setdefault(user.device.share_id, (view, {}))[1].setdefault(user.pod_uid, user.load)
    out = []
    for share_id, (view, pods) in groups.items():
        util = sum(draw(*load.utilization, entity.uuid, uid, period) for uid, load in pods.items())
        memory = sum(_memory_mib(load, view or entity.memory_mib) for load in pods.values())
        cap = min(view, usable) if view else usable
        out.append(ShareUse(share_id, entity.device, min(util, 100), max(0, min(memory, cap)), view))
    return out
