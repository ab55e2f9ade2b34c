"""Six built-in profiles against NVIDIA's `nvidia-smi -q -x` of the same model, field by field.

The captures are tests/data/nvidia-smi/qx/ (README there). Our side is the device file of GPU 0 of
a node of that model (docs/nvml.md), its idle readings included; the capture's side is its first GPU.
Values that belong to one board or moment (serial, UUID, bus ID, readings of the other GPUs) are not
compared; a field the capture prints as N/A, or as deprecated, must be absent on our side.
"""

from __future__ import annotations

import gzip
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from dra_fake.gpu.devicefile import board_id, device_keys
from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.profiles import load_profiles

CAPTURES = Path(__file__).parent / "data" / "nvidia-smi" / "qx"
MODELS = {
    "a100-sxm4-40gb": "a100",
    "h100-sxm5-80gb": "h100",
    "b200": "b200",
    "gb200": "gb200",
    "l40s": "l40s",
    "t4": "t4",
}
ABSENT = ("N/A", "Requested functionality has been deprecated")
Keys = dict[str, str]


def capture(model: str) -> ET.Element:
    with gzip.open(CAPTURES / f"qx-{model}.xml.gz") as f:
        return ET.fromstring(f.read())


def number(text: str) -> str:
    """`700.00 W` -> `700`, `16x` -> `16`, `2619 MHz` -> `2619` (the value our keys hold)."""
    value = text.split()[0].removesuffix("x")
    return value.removesuffix(".00")


def on_off(text: str) -> str:
    return {"Enabled": "1", "Disabled": "0"}[text]


# capture path (below <gpu>) -> (our key, capture text -> our value)
FIELDS: dict[str, tuple[str, Callable[[str], str]]] = {
    "product_name": ("name", str),
    "product_brand": ("brand", lambda t: {"NVIDIA": "14"}[t]),
    "product_architecture": ("architecture_name", str),
    "persistence_mode": ("persistence_mode", on_off),
    "addressing_mode": ("addressing_mode", str),
    "mig_mode/current_mig": ("mig_mode", str),
    "vbios_version": ("vbios_version", str),
    "board_part_number": ("board_part_number", str),
    "gpu_part_number": ("gpu_part_number", str),
    "inforom_version/img_version": ("inforom_image", str),
    "inforom_version/oem_object": ("inforom_oem", str),
    "inforom_version/ecc_object": ("inforom_ecc", str),
    "inforom_version/pwr_object": ("inforom_pwr", str),
    "pci/pci_device_id": ("pci_device_id", lambda t: f"0x{t}"),
    "pci/pci_sub_system_id": ("pci_subsystem_id", lambda t: f"0x{t}"),
    "pci/pci_gpu_link_info/pcie_gen/max_link_gen": ("pcie_max_gen", str),
    "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen": ("pcie_gpu_max_gen", str),
    "pci/pci_gpu_link_info/link_widths/max_link_width": ("pcie_max_width", number),
    "fb_memory_usage/total": ("memory_mib", number),
    "fb_memory_usage/reserved": ("fb_reserved", number),
    "bar1_memory_usage/total": ("bar1_mib", number),
    "compute_mode": ("compute_mode", lambda t: {"Default": "0"}[t]),
    "ecc_mode/current_ecc": ("ecc_mode", on_off),
    "gpu_power_readings/current_power_limit": ("power_cap", number),
    "gpu_power_readings/default_power_limit": ("power_default_limit", number),
    "gpu_power_readings/min_power_limit": ("power_min_limit", number),
    "gpu_power_readings/max_power_limit": ("power_max_limit", number),
    "max_clocks/graphics_clock": ("clock_max_graphics", number),
    "max_clocks/sm_clock": ("clock_max_sm", number),
    "max_clocks/mem_clock": ("clock_max_mem", number),
    "max_clocks/video_clock": ("clock_max_video", number),
    "default_applications_clocks/graphics_clock": ("clock_app_graphics", number),
    "default_applications_clocks/mem_clock": ("clock_app_mem", number),
    # an idle GPU's readings (GPU 0 of the capture, 0 % utilization)
    "gpu_power_readings/instant_power_draw": ("power_draw", lambda t: t.split()[0]),
    "temperature/gpu_temp": ("temperature", number),
    "temperature/memory_temp": ("memory_temperature", number),
    "clocks/graphics_clock": ("sm_clock", number),
    "clocks/sm_clock": ("sm_clock", number),
    "clocks/mem_clock": ("mem_clock", number),
    "clocks/video_clock": ("video_clock", number),
}


def thresholds(gpu: ET.Element) -> dict[str, str | None]:
    """The absolute temperature thresholds the capture gives
    (docs/reference/gpu-profiles.md#temperature-thresholds). Drivers before 580 print them; 580
    prints them relative to T.Limit, the GPU_MAX threshold (= current temperature + the distance
    nvidia-smi prints as gpu_temp_tlimit), and its memory threshold does not relate to NVML's
    MEM_MAX (the H200's NVML says 95 where T.Limit is 87)."""
    t = gpu.find("temperature")
    assert t is not None

    def read(tag: str) -> str | None:
        text = t.findtext(tag) or "N/A"
        return None if text in ABSENT else number(text)

    tlimit = read("gpu_temp_tlimit")
    if tlimit is None:
        return {
            "temp_shutdown": read("gpu_temp_max_threshold"),
            "temp_slowdown": read("gpu_temp_slow_threshold"),
            "temp_gpu_max": read("gpu_temp_max_gpu_threshold"),
            "temp_mem_max": read("gpu_temp_max_mem_threshold"),
        }
    limit = int(read("gpu_temp") or 0) + int(tlimit)
    return {
        "temp_shutdown": str(limit - int(read("gpu_temp_max_tlimit_threshold") or 0)),
        "temp_slowdown": str(limit - int(read("gpu_temp_slow_tlimit_threshold") or 0)),
        "temp_gpu_max": str(limit - int(read("gpu_temp_max_gpu_tlimit_threshold") or 0)),
        "temp_mem_max": None,
    }


def node(profile: str, count: int) -> Inventory:
    config = parse_config({"gpus": [{"profile": profile, "count": count}]}, "test")
    return build_inventory(config, "node-a", load_profiles())


def keys_of(inventory: Inventory, minor: int) -> Keys:
    device = inventory.devices[f"gpu-{minor}"]
    written = device_keys(inventory.gpu(minor), device, inventory.gpu(minor).uuid)
    return {k: str(v) for k, v in written.items()}


@pytest.mark.parametrize("profile", sorted(MODELS))
def test_device_file_equals_the_capture(profile: str) -> None:
    root = capture(MODELS[profile])
    gpus = root.findall("gpu")
    ours = keys_of(node(profile, 1), 0)
    real = gpus[0]
    expected: dict[str, str | None] = {
        "driver_version": root.findtext("driver_version"),
        "cuda_version": root.findtext("cuda_version"),
    }
    for path, (key, convert) in FIELDS.items():
        text = real.findtext(path)
        assert text is not None, path
        expected[key] = None if text in ABSENT else convert(text)
    expected |= thresholds(real)
    assert {k: ours.get(k) for k in expected} == expected
    # nvidia-smi's free memory (docs/nvml.md#free-memory)
    fb = {
        tag: int(number(real.findtext(f"fb_memory_usage/{tag}") or ""))
        for tag in ("total", "reserved", "used", "free")
    }
    assert fb["free"] == fb["total"] - fb["reserved"] - fb["used"] + 1


@pytest.mark.parametrize("profile", sorted(MODELS))
def test_board_and_module_ids_follow_the_capture(profile: str) -> None:
    """Board ID from the bus ID, on every GPU of the capture; module IDs of a profile that has
    them equal the capture's in bus order, others are absent (N/A)."""
    gpus = capture(MODELS[profile]).findall("gpu")
    for gpu in gpus:
        bus = gpu.findtext("pci/pci_bus_id") or ""
        assert board_id(f"{bus[4:8]}:{bus[9:]}".lower()) == gpu.findtext("board_id"), bus
    inventory = node(profile, len(gpus))
    ours = [keys_of(inventory, g.minor).get("module_id") for g in inventory.gpus]
    if any(slot.module_id for slot in inventory.gpu(0).profile.pci_topology):
        assert ours == [gpu.findtext("platformInfo/module_id") for gpu in gpus]
    else:
        assert ours == [None] * len(gpus)
