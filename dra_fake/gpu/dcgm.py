"""dcgm-exporter's /metrics text for simulated readings. Pure.

The exposition follows dcgm-exporter's GPU template line by line
(docs/reference/dcgm-exporter-and-gfd.md#a2-exposition-format): its default counter set in its CSV
order, `# HELP` and `# TYPE` per family, labels in the template's order (`gpu`, `UUID`, `pci_bus_id`,
`device`, `modelName`, MIG `GPU_I_PROFILE`/`GPU_I_ID`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, then
the attributes in sorted order), integers printed as integers, DCGM doubles with six decimals,
blank values left out. dcgm-exporter runs here as in Kubernetes mode with DRA on: a device held
through a claim gets one sample per (pod, container) with `pod`, `namespace`, `container` and the
`dra_*` labels.

Ours (docs/observability.md#per-share-metrics): a share of a shared device adds `dra_share_id` to
its pods' copies, and the `DRA_FAKE_SHARE_*` families, after dcgm-exporter's, give each share's own
usage (what its pods' nvidia-smi shows), one sample per (pod, container) of the share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from dra_fake.gpu.telemetry import Entity, Reading, ShareUse
from dra_fake.gpu.workloads import User
from dra_fake.gpu.xids import xid_message

CONTENT_TYPE = "text/plain; charset=utf-8"  # what Go's net/http sniffs for dcgm-exporter's text


@dataclass(frozen=True)
class Field:
    """A row of dcgm-exporter's default-counters.csv."""

    name: str
    type: str  # gauge | counter
    help: str
    value: Callable[[Reading], int | float | None]
    double: bool = False  # a DCGM double (printed %f), else an int64


DEFAULT_FIELDS: tuple[Field, ...] = (
    Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda r: r.sm_clock),
    Field("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", lambda r: r.mem_clock),
    Field("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", lambda r: r.memory_temp),
    Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda r: r.gpu_temp),
    Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda r: r.power_w, double=True),
    Field(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        lambda r: r.energy_mj,
    ),
    Field(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", lambda r: r.pcie_replay
    ),
    Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda r: r.gpu_util),
    Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", lambda r: r.mem_copy_util),
    Field("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", lambda r: r.enc_util),
    Field("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", lambda r: r.dec_util),
    Field("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda r: r.xid),
    Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", lambda r: r.fb_free),
    Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda r: r.fb_used),
    Field(
        "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", lambda r: r.fb_reserved
    ),
    Field(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
        lambda r: r.nvlink_total,
    ),
    Field("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", lambda r: r.vgpu_license),
    Field(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        lambda r: r.remapped_rows_uncorrectable,
    ),
    Field(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        lambda r: r.remapped_rows_correctable,
    ),
    Field(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed",
        lambda r: r.row_remap_failure,
    ),
    Field(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        lambda r: r.gr_engine_active,
        double=True,
    ),
    Field(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        lambda r: r.tensor_active,
        double=True,
    ),
    Field(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        lambda r: r.dram_active,
        double=True,
    ),
    Field(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads"
        " - in bytes per second.",
        lambda r: r.pcie_tx_bytes,
    ),
    Field(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads"
        " - in bytes per second.",
        lambda r: r.pcie_rx_bytes,
    ),
)
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_quote(v)}"' for k, v in pairs) + "}"


def _value(value: int | float, double: bool) -> str:
    return f"{float(value):f}" if double else str(int(value))


def _entity_labels(entity: Entity, hostname: str) -> list[tuple[str, str]]:
    gpu = entity.gpu
    pairs = [
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", entity.bus_id),
        ("device", f"nvidia{gpu.index}"),
        ("modelName", gpu.profile.product_name),
    ]
    if entity.is_mig:
        pairs += [("GPU_I_PROFILE", entity.mig_profile), ("GPU_I_ID", str(entity.gi_id))]
    pairs += [("Hostname", hostname), ("DCGM_FI_DRIVER_VERSION", gpu.profile.driver_version)]
    return pairs


def _user_attributes(entity: Entity, user: User, driver: str) -> dict[str, str]:
    attrs = {
        "pod": user.pod,
        "namespace": user.namespace,
        "container": user.container,
        "dra_claim_name": user.claim_name,
        "dra_claim_namespace": user.namespace,
        "dra_driver_name": driver,
        "dra_pool_name": user.device.pool,
        "dra_device_name": user.device.name,
    }
    if entity.is_mig:
        attrs |= {"dra_mig_profile": entity.mig_profile, "dra_mig_device_uuid": entity.mig_uuid}
    if user.device.share_id is not None:
        attrs["dra_share_id"] = user.device.share_id  # ours: dcgm-exporter has no share label
    return attrs


@dataclass(frozen=True)
class ShareField:
    """One of our per-share families (not dcgm-exporter's)."""

    name: str
    help: str
    value: Callable[[ShareUse], int | None]


SHARE_FIELDS: tuple[ShareField, ...] = (
    ShareField(
        "DRA_FAKE_SHARE_GPU_UTIL",
        "GPU utilization of one share's pods (in %); dra-fake's own.",
        lambda s: s.utilization,
    ),
    ShareField(
        "DRA_FAKE_SHARE_FB_USED",
        "Framebuffer memory used by one share's pods (in MiB); dra-fake's own.",
        lambda s: s.memory_used_mib,
    ),
    ShareField(
        "DRA_FAKE_SHARE_FB_TOTAL",
        "Framebuffer memory of one share: its consumed capacity (in MiB); dra-fake's own.",
        lambda s: s.memory_mib,
    ),
)


Sample = tuple[str, Entity, Reading, Sequence[User]]  # (Hostname, entity, reading, its users)
ShareKey = tuple[str, str]  # (device name, share ID)


def render(
    samples: Sequence[Sample],
    driver: str = "gpu.nvidia.com",
    fields: Sequence[Field] = DEFAULT_FIELDS,
    shares: Mapping[ShareKey, ShareUse] | None = None,
) -> str:
    """The /metrics body: every field's family, one sample per entity, or per (pod, container)
    holding it; with `shares`, our per-share families after them. Fleet mode serves many nodes'
    entities on one endpoint (their Hostname tells)."""
    lines: list[str] = []
    for f in fields:
        body: list[str] = []
        for hostname, entity, reading, users in samples:
            value = f.value(reading)
            if value is None or (reading.lost and f.name != XID_FIELD):
                continue
            base = _entity_labels(entity, hostname)
            extra: dict[str, str] = {}
            if f.name == XID_FIELD:
                extra = {"err_code": str(reading.xid), "err_msg": xid_message(reading.xid)}
            copies = [_user_attributes(entity, u, driver) for u in users] or [{}]
            for attrs in copies:
                merged = attrs | extra
                line = _labels(base + sorted(merged.items()))
                body.append(f"{f.name}{line} {_value(value, f.double)}")
        if body:
            lines += [f"# HELP {f.name} {f.help}", f"# TYPE {f.name} {f.type}", *body]
    for sf in SHARE_FIELDS if shares else ():
        body = []
        for hostname, entity, reading, users in samples:
            if reading.lost:
                continue
            for user in users:
                use = shares.get((entity.device, user.device.share_id or "")) if shares else None
                value = None if use is None else sf.value(use)
                if value is not None:
                    pairs = sorted(_user_attributes(entity, user, driver).items())
                    body.append(f"{sf.name}{_labels(_entity_labels(entity, hostname) + pairs)} {value}")
        if body:
            lines += [f"# HELP {sf.name} {sf.help}", f"# TYPE {sf.name} gauge", *body]
    return "\n".join(lines) + "\n" if lines else ""
