"""The H200 is the reference model: what dra-fake writes for it equals a real H200, field by field.

The real output is tests/data/nvidia-smi/h200-580/ (README there): every `--query-gpu` field of
nvidia-smi 580.159.04 queried alone, every NVML getter, NVML's GPU-instance profiles and
`mig -lgipp`. Our side is the device file and the live file of an idle simulated H200
(docs/nvml.md), mapped to the query fields by QUERY below. The C nvidia-smi is compared with the same
data by its own tests.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.monitor import GpuMonitor
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.profiles import load_profiles

CAPTURE = Path(__file__).parent / "data" / "nvidia-smi" / "h200-580"
MIB = 1 << 20

# Values of one machine or one moment, not of the model (the README of the capture lists them).
MACHINE = {
    "timestamp",
    "serial",  # its shape is checked below
    "uuid",
    "pci.bus_id",
    "pci.bus",
    "pci.device",
    "platform.module_id",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "power.draw.average",
    "power.draw.instant",
    "clocks.current.graphics",
    "clocks.current.sm",
}

Keys = dict[str, str]


def on_off(value: str) -> str:
    return {"1": "Enabled", "0": "Disabled"}[value]


def unit(key: str, suffix: str) -> Callable[[Keys], str]:
    return lambda k: f"{k[key]} {suffix}" if key in k else "[N/A]"


def plain(key: str) -> Callable[[Keys], str]:
    return lambda k: k.get(key, "[N/A]")


def watts(key: str) -> Callable[[Keys], str]:
    return lambda k: f"{int(k[key]):.2f} W"


# nvidia-smi --query-gpu field -> its value (csv,noheader) from our device and live keys.
QUERY: dict[str, Callable[[Keys], str]] = {
    "driver_version": plain("driver_version"),
    "count": lambda k: "1",
    "index": lambda k: "0",
    "name": plain("name"),
    "pci.device_id": plain("pci_device_id"),
    "pci.sub_device_id": plain("pci_subsystem_id"),
    "pcie.link.gen.current": plain("pcie_max_gen"),
    "pcie.link.gen.gpucurrent": plain("pcie_max_gen"),
    "pcie.link.gen.max": plain("pcie_max_gen"),
    "pcie.link.gen.gpumax": plain("pcie_gpu_max_gen"),
    "pcie.link.width.current": plain("pcie_max_width"),
    "pcie.link.width.max": plain("pcie_max_width"),
    "persistence_mode": lambda k: on_off(k["persistence_mode"]),
    "addressing_mode": plain("addressing_mode"),
    "vbios_version": plain("vbios_version"),
    "inforom.img": plain("inforom_image"),
    "inforom.oem": plain("inforom_oem"),
    "inforom.ecc": plain("inforom_ecc"),
    "inforom.pwr": plain("inforom_pwr"),
    "memory.total": unit("memory_mib", "MiB"),
    "memory.reserved": unit("fb_reserved", "MiB"),
    "memory.used": unit("memory_used", "MiB"),
    # docs/nvml.md#free-memory
    "memory.free": lambda k: (
        f"{int(k['memory_mib']) - int(k['fb_reserved']) - int(k['memory_used']) + 1} MiB"
    ),
    "compute_mode": lambda k: {"0": "Default"}[k["compute_mode"]],
    "compute_cap": plain("compute_cap"),
    "utilization.gpu": unit("utilization", "%"),
    "utilization.memory": unit("memory_util", "%"),
    "utilization.encoder": unit("enc_util", "%"),
    "utilization.decoder": unit("dec_util", "%"),
    "ecc.mode.current": lambda k: on_off(k["ecc_mode"]),
    "ecc.mode.pending": lambda k: on_off(k["ecc_mode"]),
    "power.limit": watts("power_cap"),
    "enforced.power.limit": watts("power_cap"),
    "power.default_limit": watts("power_default_limit"),
    "power.min_limit": watts("power_min_limit"),
    "power.max_limit": watts("power_max_limit"),
    "clocks.current.memory": unit("mem_clock", "MHz"),
    "clocks.current.video": unit("video_clock", "MHz"),
    "clocks.applications.graphics": unit("clock_app_graphics", "MHz"),
    "clocks.applications.memory": unit("clock_app_mem", "MHz"),
    "clocks.default_applications.graphics": unit("clock_app_graphics", "MHz"),
    "clocks.default_applications.memory": unit("clock_app_mem", "MHz"),
    "clocks.max.graphics": unit("clock_max_graphics", "MHz"),
    "clocks.max.sm": unit("clock_max_sm", "MHz"),
    "clocks.max.memory": unit("clock_max_mem", "MHz"),
    "mig.mode.current": plain("mig_mode"),
    "mig.mode.pending": plain("mig_mode"),
}


def query_fields() -> dict[str, str]:
    """query-every-field.txt: field -> what nvidia-smi printed (fields it refused left out)."""
    out: dict[str, str] = {}
    for line in (CAPTURE / "query-every-field.txt").read_text().splitlines():
        field, tab, value = line.partition("\t")
        if tab and not value.startswith("ERROR:"):
            out[field] = value
    return out


def nvml_json(name: str) -> dict[str, object]:
    """An NVML dump: the JSON between the command line and the exit code."""
    text = (CAPTURE / name).read_text()
    body = text.split("\n", 1)[1].rsplit("rc=", 1)[0]
    data: dict[str, object] = json.loads(body)
    return data


def read_keys(path: Path) -> Keys:
    out: Keys = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            [out[key]] = shlex.split(value) or [""]
    return out


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> tuple[Inventory, Keys]:
    """An idle simulated H200: its device file with its live file over it (as a reader sees it)."""
    tmp = tmp_path_factory.mktemp("h200")
    config = parse_config({"gpus": [{"profile": "h200-sxm-141gb"}]}, "test")
    inventory = build_inventory(config, "node-a", load_profiles())
    smi = NvidiaSmi.from_inventory(tmp, inventory)
    gpu = inventory.gpu(0)
    smi.write_info(inventory.devices["gpu-0"], gpu.uuid)
    GpuMonitor(inventory, list, smi, "node-a", "gpu.nvidia.com", clock=lambda: 1e9).sample()
    keys = read_keys(smi.info_path("gpu-0", gpu.uuid)) | read_keys(smi.live_path(gpu.uuid))
    return inventory, keys


def test_every_mapped_query_field_equals_the_capture(h200: tuple[Inventory, Keys]) -> None:
    _, keys = h200
    real = query_fields()
    assert not MACHINE & QUERY.keys()
    assert QUERY.keys() <= real.keys(), sorted(QUERY.keys() - real.keys())
    ours = {field: value(keys) for field, value in QUERY.items()}
    assert ours == {field: real[field] for field in QUERY}
    # nvidia-smi's T.Limit is the distance to the GPU_MAX threshold at the captured temperature
    assert int(keys["temp_gpu_max"]) - int(real["temperature.gpu"]) == int(real["temperature.gpu.tlimit"])
    # a serial of the same shape: 13 digits with the H200's prefix
    assert re.fullmatch(r"\d{13}", keys["serial"]) and keys["serial"][:3] == real["serial"][:3]


def test_the_capture_leaves_nothing_unmapped_that_a_key_holds(h200: tuple[Inventory, Keys]) -> None:
    """A field the capture answers with [N/A] must be absent on our side too (not invented)."""
    _, keys = h200
    real = query_fields()
    for field, value in QUERY.items():
        if real[field] == "[N/A]":
            assert value(keys) == "[N/A]", field


def test_nvml_getters_equal_the_capture(h200: tuple[Inventory, Keys]) -> None:
    _, k = h200
    dump = nvml_json("nvdump.txt")
    device, system, args = dump["device"], dump["system"], dump["args"]
    assert isinstance(device, dict) and isinstance(system, dict) and isinstance(args, dict)
    assert (device["nvmlDeviceGetBrand"], device["nvmlDeviceGetArchitecture"]) == (
        int(k["brand"]),
        int(k["architecture"]),
    )
    assert device["nvmlDeviceGetName"] == k["name"]
    assert device["nvmlDeviceGetBoardPartNumber"] == k["board_part_number"]
    assert device["nvmlDeviceGetVbiosVersion"] == k["vbios_version"]
    assert device["nvmlDeviceGetInforomImageVersion"] == k["inforom_image"]
    assert device["nvmlDeviceGetMemoryBusWidth"] == int(k["memory_bus_width"])
    assert device["nvmlDeviceGetBAR1MemoryInfo"]["bar1Total"] == int(k["bar1_mib"]) * MIB
    assert device["nvmlDeviceGetMemoryInfo"]["total"] == int(k["memory_mib"]) * MIB
    # docs/nvml.md#free-memory: the reserved bytes behind the 616 MiB nvidia-smi prints
    assert device["nvmlDeviceGetMemoryInfo"]["used"] == (int(k["fb_reserved"]) - 1) * MIB + 64 * 1024
    assert device["nvmlDeviceGetMaxPcieLinkGeneration"] == int(k["pcie_max_gen"])
    assert device["nvmlDeviceGetGpuMaxPcieLinkGeneration"] == int(k["pcie_gpu_max_gen"])
    assert device["nvmlDeviceGetMaxPcieLinkWidth"] == int(k["pcie_max_width"])
    assert device["nvmlDeviceGetPowerManagementDefaultLimit"] == int(k["power_default_limit"]) * 1000
    assert device["nvmlDeviceGetEnforcedPowerLimit"] == int(k["power_cap"]) * 1000
    assert device["nvmlDeviceGetPowerManagementLimitConstraints"] == [
        int(k["power_min_limit"]) * 1000,
        int(k["power_max_limit"]) * 1000,
    ]
    assert device["nvmlDeviceGetPersistenceMode"] == int(k["persistence_mode"])
    assert device["nvmlDeviceGetComputeMode"] == int(k["compute_mode"])
    assert device["nvmlDeviceGetCurrentEccMode"] == int(k["ecc_mode"])
    assert device["nvmlDeviceGetAddressingMode"] == {"None": 0, "HMM": 1, "ATS": 2}[k["addressing_mode"]]
    assert device["nvmlDeviceGetMigMode"] == [0, 0] and k["mig_mode"] == "Disabled"
    assert device["nvmlDeviceGetCudaComputeCapability"] == [int(x) for x in k["compute_cap"].split(".")]
    # the full GPU has no MIG attributes: nvmlDeviceGetAttributes is NOT_SUPPORTED, and no key
    assert device["nvmlDeviceGetAttributes"] == "NVMLError Not Supported"
    assert not {"sm", "ce", "dec", "enc", "jpg", "ofa"} & k.keys()
    assert system["nvmlSystemGetDriverVersion"] == k["driver_version"]
    assert system["nvmlSystemGetNVMLVersion"] == k["nvml_version"]
    assert system["nvmlSystemGetCudaDriverVersion"] == int(k["cuda_driver_version"])
    # clocks (graphics 0, SM 1, memory 2, video 3) and temperature thresholds by NVML enum value
    maxima = ("clock_max_graphics", "clock_max_sm", "clock_max_mem", "clock_max_video")
    assert [args[f"MaxClockInfo({i})"] for i in range(4)] == [int(k[key]) for key in maxima]
    assert [args[f"DefaultApplicationsClock({i})"] for i in range(3)] == [
        int(k["clock_app_graphics"]),
        int(k["clock_app_graphics"]),
        int(k["clock_app_mem"]),
    ]
    thresholds = ("temp_shutdown", "temp_slowdown", "temp_mem_max", "temp_gpu_max")
    assert [args[f"TemperatureThreshold({i})"] for i in range(4)] == [int(k[key]) for key in thresholds]


def test_gpu_instance_profiles_equal_nvml(h200: tuple[Inventory, Keys]) -> None:
    inventory, k = h200
    captured = nvml_json("nvml.txt")
    real = {
        int(index): info for index, info in dict(captured["gi_profiles"]).items() if isinstance(info, dict)
    }
    ours = {}
    for row in k["gi_profiles"].split():
        index, gid, slices, count, sm, ce, dec, enc, jpg, ofa, mib, name = row.split(":")
        ours[int(index)] = {
            "id": int(gid),
            "sliceCount": int(slices),
            "instanceCount": int(count),
            "multiprocessorCount": int(sm),
            "copyEngineCount": int(ce),
            "decoderCount": int(dec),
            "encoderCount": int(enc),
            "jpegCount": int(jpg),
            "ofaCount": int(ofa),
            "memorySizeMB": int(mib),
            "name": f"MIG {name}",
        }
    assert ours == {i: {key: info[key] for key in ours.get(i, {})} for i, info in real.items()}
    # the GPU's CUDA attributes the profile holds
    cuda = captured["cuda"]
    assert isinstance(cuda, dict)
    profile = inventory.gpu(0).profile
    assert (profile.multiprocessors, profile.copy_engines) == (cuda["sm"], cuda["async_engines"])
    assert profile.memory_bus_width == cuda["buswidth"]


def test_placements_equal_lgipp(h200: tuple[Inventory, Keys]) -> None:
    _, k = h200
    real = {}
    for line in (CAPTURE / "lgipp.txt").read_text().splitlines():
        m = re.fullmatch(r"GPU +0 Profile ID +(\d+) Placements? *: \{([\d,]+)\}:(\d+)", line)
        if m:
            real[int(m[1])] = [(int(start), int(m[3])) for start in m[2].split(",")]
    ours = {}
    for entry in k["gi_placements"].split():
        gid, placements = entry.split(":")
        ours[int(gid)] = [tuple(int(x) for x in p.split("+")) for p in placements.split(",")]
    assert ours == real and len(real) == 7
