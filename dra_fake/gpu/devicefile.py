"""The static keys of a device file: what NVML and nvidia-smi report about one GPU or MIG device
(docs/nvml.md is the one definition of the keys; docs/reference/gpu-profiles.md the source of every
value). Pure: the GPU's profile, its place on the node and the device in, `key -> value` out.

A key is left out when the profile has no value for it (null: no capture gives it); NVML then
answers NOT_SUPPORTED and nvidia-smi prints N/A, as on a board that lacks the value.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping

from dra_fake.gpu.devices import AllocatableDevice, MigPlacement
from dra_fake.gpu.inventory import PhysicalGpu
from dra_fake.gpu.profiles.models import GpuProfile, MigProfile

Value = str | int

# nvmlBrandType_t of go-nvlib's brand strings (nvml.h: NVML_BRAND_TESLA 2, NVML_BRAND_NVIDIA 14).
NVML_BRAND = {"Tesla": 2, "Nvidia": 14}
# nvmlDeviceArchitecture_t of the architecture strings (nvml.h NVML_DEVICE_ARCH_*).
NVML_ARCHITECTURE = {
    "Kepler": 2,
    "Maxwell": 3,
    "Pascal": 4,
    "Volta": 5,
    "Turing": 6,
    "Ampere": 7,
    "Ada Lovelace": 8,
    "Hopper": 9,
    "Blackwell": 10,
}
SERIAL_DIGITS = 13  # every captured serial (docs/reference/gpu-profiles.md#board-identity)
COMPUTE_MODE_DEFAULT = 0  # NVML_COMPUTEMODE_DEFAULT: every capture; the simulation never changes it
MIB = 1 << 20
# CUDA cores per SM (nvmlDeviceGetNumGpuCores = SMs x this): NVIDIA's architecture whitepapers
# (GA100 64, Turing 64, Ada 128, Hopper 128); the H200 capture's 16896 = 132 x 128. Blackwell: no
# capture and no published figure for the data-centre parts, so left out (NOT_SUPPORTED).
CORES_PER_SM = {"Turing": 64, "Ampere": 64, "Ada Lovelace": 128, "Hopper": 128}
# NVLink links per GPU of the NVLink-connected SXM boards (NVIDIA's datasheets: A100 12 third-gen
# links, H100/H200 18 fourth-gen, B200/GB200 18 fifth-gen); boards without NVLink: left out.
NVLINK_LINKS = {"Ampere": 12, "Hopper": 18, "Blackwell": 18}
# nvmlSystemGetDriverBranch of the drivers a capture shows (h200-580 nvdump.txt).
DRIVER_BRANCH = {"580.159.04": "r582_49"}
# Every capture (qx-*.xml, h200-580): not a multi-GPU board, display mode 1 / active 0 (nvdump),
# GSP firmware on (a gsp_firmware_version on every board). Virtualization: the captures from VMs say
# Pass-Through (1); a simulated node is bare metal, NVML_GPU_VIRTUALIZATION_MODE_NONE (0), as the
# bare-metal GB300 capture.
MULTI_GPU_BOARD, DISPLAY_MODE, DISPLAY_ACTIVE, GSP_FIRMWARE_MODE, VIRTUALIZATION_MODE = 0, 1, 0, 1, 0


def nvidia_bus_id(pci_bus_id: str) -> str:
    """`0000:18:00.0` -> `00000000:18:00.0` (nvidia-smi: 8-digit domain, upper-case hex)."""
    domain, rest = pci_bus_id.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def board_id(pci_bus_id: str) -> str:
    """nvmlDeviceGetBoardId as nvidia-smi prints it: domain << 16 | bus << 8 | device, which every
    capture shows (0x5300 at 00000000:53:00.0, 0x80600 at 00000008:06:00.0, 0x1e at 00:1E.0)."""
    domain, bus, rest = pci_bus_id.split(":")
    device = rest.split(".")[0]
    return hex(int(domain, 16) << 16 | int(bus, 16) << 8 | int(device, 16))


def gi_instance_id(size: int, start: int) -> int:
    """A GPU-instance ID like the ones NVML hands out (simulated, deterministic, unique per
    placement): 0 for the whole GPU, then the larger instances first."""
    base = {8: 0, 7: 0, 4: 1, 3: 1, 2: 3, 1: 7}.get(size, 7)
    return base + start // max(size, 1)


def serial(profile: GpuProfile, gpu_uuid: str) -> str | None:
    """A 13-digit serial: the model's prefix, the rest fixed by the GPU's UUID; None without a
    known prefix (the public captures scrub serials)."""
    prefix = profile.serial_prefix
    if prefix is None:
        return None
    width = SERIAL_DIGITS - len(prefix)
    digest = int.from_bytes(hashlib.blake2b(gpu_uuid.encode(), digest_size=8).digest(), "big")
    return f"{prefix}{digest % 10**width:0{width}d}"


def cuda_driver_version(version: str) -> int:
    """nvmlSystemGetCudaDriverVersion: "13.0" -> 13000 (major * 1000 + minor * 10)."""
    major, minor = version.split(".")
    return int(major) * 1000 + int(minor) * 10


def nvml_version(profile: GpuProfile) -> str:
    """nvmlSystemGetNVMLVersion: "<CUDA major>.<driver>", e.g. 13.580.159.04 (H200 capture)."""
    return f"{profile.cuda_driver_version.split('.')[0]}.{profile.driver_version}"


def gi_profiles(profile: GpuProfile) -> str:
    """`index:id:slices:instances:sm:ce:dec:enc:jpg:ofa:memoryMiB:name` per GI profile NVML knows,
    by NVML index; profiles with a value no source gives are left out (NVML: NOT_SUPPORTED)."""
    rows = []
    for m in sorted(_known(profile), key=lambda m: m.nvml_index or 0):
        counts = (m.multiprocessors, m.copy_engines, m.decoders, m.encoders, m.jpeg_engines, m.ofa_engines)
        fields = (m.nvml_index, m.gi_profile_id, m.compute_slices, m.max_count, *counts, m.memory_mib, m.name)
        rows.append(":".join(str(f) for f in fields))
    return " ".join(rows)


def gi_placements(profile: GpuProfile) -> str:
    """`id:start+size,start+size,...` per GI profile of gi_profiles."""
    return " ".join(
        f"{m.gi_profile_id}:" + ",".join(f"{p.start}+{p.size}" for p in m.placements)
        for m in sorted(_known(profile), key=lambda m: m.nvml_index or 0)
    )


def _known(profile: GpuProfile) -> list[MigProfile]:
    return [m for m in profile.mig_profiles if m.nvml_index is not None and m.complete]


def gpu_keys(gpu: PhysicalGpu) -> dict[str, Value | None]:
    """A GPU's static keys (docs/nvml.md#static-keys-device-files-written-when-the-claim-is-prepared),
    in that table's order; None = the key is left out."""
    p, t = gpu.profile, gpu.profile.telemetry
    inforom = p.inforom

    def flag(value: bool | None) -> int | None:
        return None if value is None else int(value)

    keys: dict[str, Value | None] = {
        "gpu_uuid": gpu.uuid,
        "minor": gpu.minor,
        "serial": serial(p, gpu.uuid),
        "name": p.product_name,
        "brand": NVML_BRAND.get(p.brand),
        "architecture": NVML_ARCHITECTURE.get(p.architecture),
        "architecture_name": p.architecture,
        "compute_cap": p.cuda_compute_capability,
        "bus_id": nvidia_bus_id(gpu.pci_bus_id),
        "pci_device_id": p.pci_device_id,
        "pci_subsystem_id": p.pci_subsystem_id,
        "pcie_max_gen": p.pcie.max_generation,
        "pcie_gpu_max_gen": p.pcie.gpu_max_generation,
        "pcie_max_width": p.pcie.max_width,
        "board_id": board_id(gpu.pci_bus_id),
        "board_part_number": p.board_part_number,
        "gpu_part_number": p.gpu_part_number,
        "module_id": gpu.module_id,
        "vbios_version": p.vbios_version,
        "inforom_image": inforom.image,
        "inforom_oem": inforom.oem,
        "inforom_ecc": inforom.ecc,
        "inforom_pwr": inforom.pwr,
        "driver_version": p.driver_version,
        "nvml_version": nvml_version(p),
        "cuda_version": p.cuda_driver_version,
        "cuda_driver_version": cuda_driver_version(p.cuda_driver_version),
        "memory_mib": p.memory_mib,
        "fb_reserved": t.fb_reserved_mib,
        "bar1_mib": p.bar1_mib,
        "memory_bus_width": p.memory_bus_width,
        "power_cap": t.power_limit_w,
        "power_default_limit": t.power_limit_w,
        "power_min_limit": t.power_min_limit_w,
        "power_max_limit": t.power_max_limit_w,
        "clock_max_graphics": t.sm_clock_max_mhz,  # graphics = SM on every capture
        "clock_max_sm": t.sm_clock_max_mhz,
        "clock_max_mem": t.memory_clock_max_mhz,
        "clock_max_video": t.video_clock_max_mhz,
        "clock_app_graphics": t.app_clock_graphics_mhz,
        "clock_app_mem": t.app_clock_memory_mhz,
        "temp_shutdown": t.shutdown_temperature_c,
        "temp_slowdown": t.slowdown_temperature_c,
        "temp_gpu_max": t.gpu_max_temperature_c,
        "temp_mem_max": t.memory_max_temperature_c,
        "persistence_mode": flag(p.persistence_mode),
        "ecc_mode": flag(p.ecc_mode),
        "compute_mode": COMPUTE_MODE_DEFAULT,
        # N/A on boards without MIG (L40S, T4 captures)
        "mig_mode": ("Enabled" if gpu.mig_mode != "none" else "Disabled") if p.mig_capable else None,
        "addressing_mode": p.addressing_mode,
        "multi_gpu_board": MULTI_GPU_BOARD,
        "num_gpu_cores": p.multiprocessors * CORES_PER_SM[p.architecture]
        if p.architecture in CORES_PER_SM
        else None,
        "driver_branch": DRIVER_BRANCH.get(p.driver_version),
        "gsp_firmware_mode": GSP_FIRMWARE_MODE,
        "display_mode": DISPLAY_MODE,
        "display_active": DISPLAY_ACTIVE,
        "virtualization_mode": VIRTUALIZATION_MODE,
        "nvlink_link_count": NVLINK_LINKS.get(p.architecture) if p.telemetry.nvlink else None,
        "gi_profiles": gi_profiles(p) or None,
        "gi_placements": gi_placements(p) or None,
        # an idle GPU's readings, until the live file says otherwise
        "power_draw": f"{t.power_idle_w:.2f}",
        "temperature": t.temperature_idle_c,
        "memory_temperature": t.memory_temperature_idle_c,
        "sm_clock": t.sm_clock_idle_mhz,
        "mem_clock": t.memory_clock_mhz,
        "video_clock": t.video_clock_idle_mhz,
    }
    return keys


def mig_keys(
    gpu: PhysicalGpu, device: AllocatableDevice, mig: MigPlacement, uuid: str
) -> dict[str, Value | None]:
    """What a MIG device's file adds to its GPU's keys."""
    profile = gpu.profile
    gi = profile.mig_profile(mig.profile)
    counts: tuple[int | None, ...] = (None,) * 6
    if gi is not None:
        counts = (gi.multiprocessors, gi.copy_engines, gi.decoders)
        counts += (gi.encoders, gi.jpeg_engines, gi.ofa_engines)
    bar1 = profile.bar1_mib
    return {
        "mig_uuid": uuid,
        "mig_profile": mig.profile,
        "gi_profile_id": mig.gi_profile_id,
        "gi_id": gi_instance_id(mig.size, mig.start),
        "ci_id": 0,  # one compute instance spanning the GPU instance
        "gi_start": mig.start,
        "gi_size": mig.size,
        "mig_memory_mib": device.memory_bytes // MIB,
        # simulated: the GPU's BAR1 shared by memory slices (no capture of a MIG device's BAR1 fits)
        "mig_bar1_mib": None if bar1 is None else bar1 * mig.size // (profile.mig_memory_slices or 8),
        **dict(zip(("sm", "ce", "dec", "enc", "jpg", "ofa"), counts, strict=True)),
    }


def device_keys(gpu: PhysicalGpu, device: AllocatableDevice, uuid: str) -> dict[str, Value]:
    """Every key of one device's file: `kind`, its GPU's keys and, for a MIG device, its own."""
    keys: dict[str, Value | None] = {"kind": device.kind, **gpu_keys(gpu)}
    if device.kind == "mig" and device.mig is not None:
        keys |= mig_keys(gpu, device, device.mig, uuid)
    return {k: v for k, v in keys.items() if v is not None}


def device_text(gpu: PhysicalGpu, device: AllocatableDevice, uuid: str, gpu_text: str | None = None) -> str:
    """The device file (device_keys as lines). `gpu_text`: lines(gpu_keys(gpu)), the same in every
    file of the GPU, for a caller that keeps it (a prepare writes files of new MIG UUIDs often)."""
    text = f"# dra-fake device file: {device.name}\n" + lines({"kind": device.kind})
    text += lines(gpu_keys(gpu)) if gpu_text is None else gpu_text
    if device.kind == "mig" and device.mig is not None:
        text += lines(mig_keys(gpu, device, device.mig, uuid))
    return text


def share_keys(share_id: str, memory_mib: int | None) -> dict[str, Value]:
    """What a share's device file adds (docs/nvml.md#shares): its ID, and the memory it may use
    when that is its view (`memory_mib`; None: the share sees the whole device)."""
    keys: dict[str, Value] = {"share_id": share_id}
    if memory_mib is not None:
        keys["share_memory_mib"] = memory_mib
    return keys


def share_memory_mib(device_memory_bytes: int, consumed_bytes: int | None) -> int | None:
    """The share's memory view: its consumed memory in whole MiB when that is more than 0 and less
    than the device's (a share of all of it, or of none, as `unlimited` and N give, sees the device)."""
    if consumed_bytes is None:
        return None
    mib = consumed_bytes // MIB
    return mib if 0 < mib < device_memory_bytes // MIB else None


def lines(keys: Mapping[str, Value | float | None]) -> str:
    """`key=value` lines, values quoted as POSIX sh reads them; None values left out."""
    return "".join(f"{key}={shlex.quote(str(value))}\n" for key, value in keys.items() if value is not None)


def render(keys: Mapping[str, Value | float], comment: str) -> str:
    """lines(keys) after a `#` comment line."""
    return f"# {comment}\n" + lines(keys)
