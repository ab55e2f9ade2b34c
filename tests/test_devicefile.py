"""The device files and live files the plugin writes carry the keys docs/nvml.md defines, and
nothing else: that page is the one definition of the interface the in-pod NVML library reads."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from crash_helper import NODE, make_claim, make_state, result

from dra_fake.gpu.devicefile import MIB, device_keys, gi_instance_id, render, serial, share_memory_mib
from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.monitor import GpuMonitor, live_state
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.profiles import BUILTIN_PROFILE_IDS, load_profiles
from dra_fake.gpu.telemetry import Reading
from dra_fake.gpu.workloads import ANNOTATION_MEMORY, ANNOTATION_UTILIZATION, ClaimHolding, HeldDevice

NVML_MD = Path(__file__).parent.parent / "docs" / "nvml.md"
GIB = 1 << 30


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
    gpu = read_keys((smi.live_path(inventory.gpu(0).uuid)).read_text())
    [mig] = [d for d in inventory.devices.values() if d.kind == "mig"]
    assert mig.uuid is not None
    assert read_keys((smi.live_path(mig.uuid)).read_text()) == {"mig_memory_used": "0"}
    assert gpu.keys() <= LIVE
    assert (gpu["fault_xid"], gpu["fault_xid_seq"], gpu["video_clock"], gpu["memory_temperature"]) == (
        "13",
        "5",
        "765",
        "34",
    )
    assert int(gpu["energy_mj"]) > 0 and gpu["memory_used"] == "0"


SHARES = documented("Shares")
SHARE_ID = "0b6f5d2e-8c1a-4e7b-9d3f-5a2c7e1b4f60"


def h100_node(tmp_path: Path) -> tuple[Inventory, NvidiaSmi]:
    return node(tmp_path, [{"profile": "h100-sxm5-80gb"}])


def test_a_shares_file_is_the_devices_plus_its_documented_share_keys(tmp_path: Path) -> None:
    """docs/nvml.md#shares: share_id always, share_memory_mib only for a part of the device."""
    assert {"share_id", "share_memory_mib", "utilization", "memory_util", "memory_used"} == SHARES
    inventory, smi = h100_node(tmp_path)
    device = inventory.devices["gpu-0"]
    assert device.uuid is not None
    whole = smi.info_text(device, device.uuid)
    text = smi.info_text(device, device.uuid, SHARE_ID, 20480)
    assert text.startswith(whole)
    assert read_keys(text[len(whole) :]) == {"share_id": SHARE_ID, "share_memory_mib": "20480"}
    assert read_keys(smi.info_text(device, device.uuid, SHARE_ID, None)).get("share_memory_mib") is None
    # the view: a part of the device; none for 0 (unlimited, N) or all of it
    assert [share_memory_mib(81559 * MIB, b) for b in (20 * GIB, 0, 81559 * MIB, None, MIB + 5)] == [
        20480,
        None,
        None,
        None,
        1,
    ]


def test_a_shares_file_is_written_back_from_its_name_and_removed_alone(tmp_path: Path) -> None:
    """ensure_files rebuilds a share's file from the mount's name (a restart); remove_share_files
    takes only the share's own file, never the device's plain one."""
    inventory, smi = h100_node(tmp_path)
    device = inventory.devices["gpu-0"]
    assert device.uuid is not None
    plain = smi.device_mount(device, device.uuid)
    mount = smi.device_mount(device, device.uuid, SHARE_ID, 20480)
    assert mount["containerPath"] == plain["containerPath"]
    assert mount["hostPath"].endswith(f"gpu-0_{device.uuid}_{SHARE_ID}_20480")
    spec = {"devices": [{"name": "x", "containerEdits": {"mounts": [mount, plain]}}]}
    smi.ensure_files(spec)
    assert read_keys(Path(mount["hostPath"]).read_text())["share_memory_mib"] == "20480"
    assert Path(plain["hostPath"]).is_file()
    smi.remove_share_files(spec)
    smi.remove_share_files(spec)  # idempotent
    assert not Path(mount["hostPath"]).exists() and Path(plain["hostPath"]).is_file()


def test_sample_writes_each_shares_own_usage(tmp_path: Path) -> None:
    """Two shares of gpu-0 (20 GiB and the device view) and their pods: each share's live file has
    its own pods' usage, a percentage of its own view, capped at it; the GPU's is the sum."""
    inventory, smi = h100_node(tmp_path)
    first, second = SHARE_ID, "9d1c7a3e-2f4b-4c8d-8e6a-1b5f3d7c9a20"
    holdings = [
        ClaimHolding("ns", "a", (HeldDevice("gpu-0", "node-a", ("gpu",), None, first, 20480),)),
        ClaimHolding("ns", "b", (HeldDevice("gpu-0", "node-a", ("gpu",), None, second, None),)),
    ]

    def pod(name: str, memory: str, utilization: str) -> dict[str, object]:
        return {
            "metadata": {
                "namespace": "ns",
                "name": name,
                "uid": f"uid-{name}",
                "annotations": {ANNOTATION_MEMORY: memory, ANNOTATION_UTILIZATION: utilization},
            },
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "containers": [{"name": "ctr", "resources": {"claims": [{"name": "gpu"}]}}],
            },
        }

    monitor = GpuMonitor(inventory, lambda: holdings, smi, "node-a", "gpu.nvidia.com", clock=lambda: 2e9)
    monitor.set_pods([pod("a", "50%", "30"), pod("b", "4096", "20")])
    monitor.sample()
    a = read_keys(smi.live_path(f"share-{first}").read_text())
    b = read_keys(smi.live_path(f"share-{second}").read_text())
    assert a.keys() <= SHARES and b.keys() <= SHARES
    assert (a["memory_used"], a["utilization"]) == ("10240", "30")  # 50 % of its 20480 MiB
    assert (b["memory_used"], b["utilization"]) == ("4096", "20")
    gpu = read_keys((smi.live_path(inventory.gpu(0).uuid)).read_text())
    assert (gpu["memory_used"], gpu["utilization"]) == ("14336", "50")
    monitor.set_pods([pod("a", "30Gi", "30")])  # more than its view; b's pod is gone
    monitor.sample()
    assert read_keys(smi.live_path(f"share-{first}").read_text())["memory_used"] == "20480"
    assert not smi.live_path(f"share-{second}").exists()


@pytest.mark.parametrize(("memory_view", "mib"), [(True, "20480"), (False, None)], ids=["share", "device"])
def test_the_shared_memory_view_decides_what_a_shares_file_says(
    tmp_path: Path, memory_view: bool, mib: str | None
) -> None:
    """--shared-memory-view=share (default): the share's file has share_memory_mib and the
    sampler's view is the share's; device (NVIDIA's): share_id only, the whole GPU shows."""
    state = make_state(tmp_path, memory_view=memory_view)
    inventory = build_inventory(
        parse_config({"gpus": [{"profile": "h100-sxm5-80gb", "count": 8}]}, "t"), NODE, load_profiles()
    )
    state.nvidia_smi = NvidiaSmi(tmp_path / "plugin", state.devices, inventory.gpus)
    uid = "5c555555-5555-5555-5555-555555555555"
    share = result("gpu", "gpu-4", shareID=SHARE_ID, consumedCapacity={"memory": "20Gi"})
    state.prepare(make_claim(uid, [share]))
    [info] = [p for p in (tmp_path / "plugin" / "nvidia-smi" / "devices").iterdir() if SHARE_ID in p.name]
    keys = read_keys(info.read_text())
    assert keys["share_id"] == SHARE_ID and keys.get("share_memory_mib") == mib
    [held] = [d for c in state.holdings() for d in c.devices]
    assert held.share_id == SHARE_ID and held.share_memory_mib == (int(mib) if mib else None)
    state.unprepare(uid)
    assert not info.exists()
