"""The device files and live files the plugin writes carry the keys docs/nvml.md defines, and
nothing else: that page is the one definition of the interface the in-pod NVML library reads."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dra_fake.gpu.devicefile import device_keys, gi_instance_id, render, serial
from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.monitor import GpuMonitor, live_state
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.profiles import BUILTIN_PROFILE_IDS, load_profiles
from dra_fake.gpu.telemetry import Reading

NVML_MD = Path(__file__).parent.parent / "docs" / "nvml.md"


def documented(section: str) -> set[str]:
    """The keys of the tables under a `###` heading of docs/nvml.md: the backticked names of each
    row's first column (the second for the row of an idle GPU's readings)."""
    text = NVML_MD.read_text()
    body = text.split(f"### {section}", 1)[1].split("\n### ", 1)[0]
    keys: set[str] = set()
    for line in body.splitlines():
        cells = line.split(" | ")
        if not line.startswith("| ") or len(cells) < 2 or cells[0].startswith("| ---"):
            continue
        column = cells[1] if "readings" in cells[0] else cells[0]
        keys |= set(re.findall(r"`([a-z_0-9]+)(?:=1)?`", column))
    return keys


STATIC = documented("Static keys")
LIVE = documented("Live keys")


def read_keys(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            [out[key]] = shlex.split(value) or [""]
    return out


def node(tmp_path: Path, gpus: list[dict[str, object]]) -> tuple[Inventory, NvidiaSmi]:
    inventory = build_inventory(parse_config({"gpus": gpus}, "test"), "node-a", load_profiles())
    return inventory, NvidiaSmi.from_inventory(tmp_path, inventory)


def test_the_documented_keys_are_read_from_the_page() -> None:
    assert {
        "kind",
        "serial",
        "pcie_gpu_max_gen",
        "gi_profiles",
        "video_clock",
        "mig_bar1_mib",
        "ofa",
    } <= STATIC
    assert {"utilization", "pcie_rx", "energy_mj", "fault_xid", "fault_xid_seq", "mig_memory_used"} <= LIVE


@pytest.mark.parametrize("profile", BUILTIN_PROFILE_IDS)
def test_info_text_writes_only_documented_keys(tmp_path: Path, profile: str) -> None:
    gpus: list[dict[str, object]] = [{"profile": profile}]
    complete = [m for m in load_profiles()[profile].mig_profiles if m.complete]
    if complete:  # and a MIG device of the first GI profile whose values are all known
        start = complete[0].placements[0].start
        gpus.append(
            {
                "profile": profile,
                "mig": "static",
                "migDevices": [{"profile": complete[0].name, "start": start}],
            }
        )
    inventory, smi = node(tmp_path, gpus)
    assert {d.kind for d in inventory.devices.values()} == ({"gpu", "mig"} if complete else {"gpu"})
    for device in inventory.devices.values():
        uuid = device.uuid or "MIG-00000000-0000-0000-0000-000000000000"
        text = smi.info_text(device, uuid)
        keys = read_keys(text)
        assert keys.keys() <= STATIC, sorted(keys.keys() - STATIC)
        # NvidiaSmi keeps each GPU's lines: the file is still exactly its keys
        gpu = inventory.gpu(device.minor)
        assert text == render(device_keys(gpu, device, uuid), f"dra-fake device file: {device.name}")
        assert keys["kind"] == device.kind and keys["gpu_uuid"] == device.gpu_uuid


def test_h200_gpu_and_mig_files_carry_every_static_key(tmp_path: Path) -> None:
    """The reference model has a value for every key but the three its capture lacks."""
    inventory, smi = node(
        tmp_path,
        [{"profile": "h200-sxm-141gb", "mig": "static", "migDevices": [{"profile": "3g.71gb", "start": 4}]}],
    )
    [device] = inventory.devices.values()
    assert device.mig is not None and device.uuid is not None
    keys = read_keys(smi.info_text(device, device.uuid))
    not_in_capture = {"gpu_part_number", "module_id", "inforom_pwr"}
    assert keys.keys() == STATIC - not_in_capture
    gpu = inventory.gpu(0)
    assert keys["serial"] == serial(gpu.profile, gpu.uuid) and re.fullmatch(r"165\d{10}", keys["serial"])
    assert (keys["mig_uuid"], keys["mig_profile"], keys["gi_profile_id"]) == (device.uuid, "3g.71gb", "9")
    assert (keys["gi_start"], keys["gi_size"], keys["ci_id"]) == ("4", "4", "0")
    assert keys["gi_id"] == str(gi_instance_id(4, 4))
    assert (keys["mig_memory_mib"], keys["mig_bar1_mib"]) == ("71424", str(262144 // 2))
    assert [keys[k] for k in ("sm", "ce", "dec", "enc", "jpg", "ofa")] == ["60", "3", "3", "0", "3", "0"]
    assert keys["mig_mode"] == "Enabled" and keys["memory_mib"] == "143771"
    # every GI profile NVML knows, by NVML index, and their placements in the same order
    rows = [row.split(":") for row in keys["gi_profiles"].split()]
    assert [(r[0], r[1], r[-1]) for r in rows] == [
        ("0", "19", "1g.18gb"),
        ("1", "14", "2g.35gb"),
        ("2", "9", "3g.71gb"),
        ("3", "5", "4g.71gb"),
        ("4", "0", "7g.141gb"),
        ("7", "20", "1g.18gb+me"),
        ("9", "15", "1g.35gb"),
    ]
    assert [p.split(":")[0] for p in keys["gi_placements"].split()] == [r[1] for r in rows]
    assert keys["gi_placements"].split()[2] == "9:0+4,4+4"


def test_values_no_source_gives_are_absent(tmp_path: Path) -> None:
    """L40S: no MIG (N/A), GDDR6 (no memory temperature), applications clocks deprecated, serials
    scrubbed in its capture; B200: its 3g/4g/7g GI profiles are unknown, so NVML lists only four."""
    inventory, smi = node(tmp_path, [{"profile": "l40s"}, {"profile": "b200"}])
    l40s = read_keys(smi.info_text(inventory.devices["gpu-0"], inventory.gpu(0).uuid))
    absent = {
        "mig_mode",
        "memory_temperature",
        "clock_app_graphics",
        "clock_app_mem",
        "serial",
        "gi_profiles",
    }
    assert not absent & l40s.keys()
    assert l40s["temp_gpu_max"] == "88" and "temp_mem_max" not in l40s
    b200 = read_keys(smi.info_text(inventory.devices["gpu-1"], inventory.gpu(1).uuid))
    assert [row.split(":")[1] for row in b200["gi_profiles"].split()] == ["19", "14", "20", "15"]
    assert b200["persistence_mode"] == "0" and "memory_bus_width" not in b200


def test_live_state_writes_the_documented_keys(tmp_path: Path) -> None:
    reading = Reading(
        gpu_util=50,
        mem_copy_util=20,
        enc_util=0,
        dec_util=0,
        power_w=300.123,
        gpu_temp=60,
        memory_temp=50,
        sm_clock=1980,
        mem_clock=3201,
        video_clock=1545,
        pcie_tx_bytes=2048 * 1024,
        pcie_rx_bytes=1024,
        pcie_replay=0,
    )
    faults = {
        "xid": 79,
        "xid_seq": 1_796_119_200_000,
        "lost": 0,
        "ecc_sbe": 1,
        "ecc_dbe": 2,
        "temperature": 97,
    }
    state = live_state(reading, faults)
    assert state.keys() <= LIVE
    assert LIVE - state.keys() == {"energy_mj", "memory_used", "mig_memory_used"}  # added by sample()
    assert (state["pcie_tx"], state["pcie_rx"], state["power_draw"]) == (2048, 1, "300.12")
    assert (state["fault_xid"], state["fault_xid_seq"]) == (79, 1_796_119_200_000)
    # a GDDR board's memory temperature is not reported: left out, not 0
    assert "memory_temperature" not in live_state(Reading(gpu_util=0, video_clock=None), {})
    # a lost GPU has its faults only
    assert live_state(Reading(lost=True, xid=79), {"lost": 1, "xid": 79}) == {
        "fault_lost": 1,
        "fault_xid": 79,
    }


def test_sample_writes_gpu_and_mig_live_files(tmp_path: Path) -> None:
    inventory, smi = node(
        tmp_path,
        [{"profile": "h200-sxm-141gb", "mig": "static", "migDevices": [{"profile": "1g.18gb", "start": 0}]}],
    )
    monitor = GpuMonitor(inventory, list, smi, "node-a", "gpu.nvidia.com", clock=lambda: 2e9)
    monitor.set_faults({inventory.gpu(0).uuid: {"xid": 13, "xid_seq": 5}})
    monitor.sample()
    gpu = read_keys((smi.live_dir / inventory.gpu(0).uuid).read_text())
    [mig] = [d for d in inventory.devices.values() if d.kind == "mig"]
    assert mig.uuid is not None
    assert read_keys((smi.live_dir / mig.uuid).read_text()) == {"mig_memory_used": "0"}
    assert gpu.keys() <= LIVE
    assert (gpu["fault_xid"], gpu["fault_xid_seq"], gpu["video_clock"], gpu["memory_temperature"]) == (
        "13",
        "5",
        "765",
        "34",
    )
    assert int(gpu["energy_mj"]) > 0 and gpu["memory_used"] == "0"
