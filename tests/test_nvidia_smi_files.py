"""The files behind the nvidia-smi mounted into pods (dra_fake/gpu/nvidia_smi): the CDI mounts of the
tools and one info file per device, the info and live files kept right at prepare and start-up, and
the static binary. What it prints is in tests/test_nvidia_smi.py; tests/smi_container.py runs it "in a
container"."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import pytest
from smi_container import DRIVER, UID1, UID2, claim, container_root, make_state, mig_names, read_spec, run_smi

from dra_fake.core.claims import ClaimError
from dra_fake.gpu.nvidia_smi import binary_bytes, library_bytes
from dra_fake.gpu.state import DeviceState


def test_spec_mounts_tools_and_one_info_file_per_device(a100: tuple[DeviceState, Any]) -> None:
    state, inventory = a100
    migs = mig_names(inventory)
    state.prepare(claim(UID1, [*migs, "gpu-1"]))
    spec = read_spec(state, UID1)
    [binary, *libraries] = spec["containerEdits"]["mounts"]
    assert binary["containerPath"] == "/usr/bin/nvidia-smi"
    assert binary["hostPath"].endswith(f"plugins/{DRIVER}/nvidia-smi/nvidia-smi")
    assert Path(binary["hostPath"]).read_bytes() == binary_bytes()
    assert os.stat(binary["hostPath"]).st_mode & 0o777 == 0o755
    assert binary["options"] == ["ro", "nosuid", "nodev", "rbind", "rprivate"]  # NVIDIA's mount options
    # docs/nvml.md: the library under both names, in the multiarch directory and /usr/lib64
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine(), platform.machine())
    assert [m["containerPath"] for m in libraries] == [
        f"/usr/lib/{arch}-linux-gnu/libnvidia-ml.so.1",
        f"/usr/lib/{arch}-linux-gnu/libnvidia-ml.so.580.126.09",
        "/usr/lib64/libnvidia-ml.so.1",
        "/usr/lib64/libnvidia-ml.so.580.126.09",
    ]
    assert {m["hostPath"] for m in libraries} == {
        binary["hostPath"].replace("nvidia-smi/nvidia-smi", "nvidia-smi/libnvidia-ml.so.1")
    }
    assert Path(libraries[0]["hostPath"]).read_bytes() == library_bytes()
    live_mounts: dict[str, list[str]] = {}
    for dev in spec["devices"]:
        [mount, *live] = dev["containerEdits"]["mounts"]
        assert mount["containerPath"].startswith("/var/run/dra-fake/nvidia-smi/devices/")
        assert Path(mount["hostPath"]).is_file()
        # each device its own live directory (and a MIG device its GPU's), made before any
        # container mounts it: never the node's whole live directory (docs/security.md)
        for m in live:
            name = m["containerPath"].removeprefix("/var/run/dra-fake/nvidia-smi/live/")
            assert "/" not in name and m["hostPath"].endswith(f"plugins/{DRIVER}/nvidia-smi/live/{name}")
            assert Path(m["hostPath"]).is_dir() and m["options"] == binary["options"]
        live_mounts[dev["name"].removeprefix(f"{UID1}-")] = [
            m["containerPath"].rsplit("/", 1)[1] for m in live
        ]
    device = inventory.devices
    assert live_mounts["gpu-1"] == [device["gpu-1"].uuid]
    for name in migs:
        assert live_mounts[name] == [device[name].uuid, device[name].gpu_uuid]
    # a claim of gpu-1 alone mounts no live directory of gpu-0 or its MIG devices
    state.unprepare(UID1)
    state.prepare(claim(UID2, ["gpu-1"]))
    mounts = [
        m["containerPath"] for d in read_spec(state, UID2)["devices"] for m in d["containerEdits"]["mounts"]
    ]
    assert [p for p in mounts if "/live" in p] == [
        f"/var/run/dra-fake/nvidia-smi/live/{device['gpu-1'].uuid}"
    ]
    paths = [d["containerEdits"]["mounts"][0]["containerPath"] for d in spec["devices"]]
    assert len(set(paths)) == len(paths)
    # mounts without `type` need no newer version: 0.5.0 only because the claim UID starts with a digit
    assert spec["cdiVersion"] == "0.5.0"


def test_dynamic_mig_info_file_follows_the_claim(tmp_path: Path) -> None:
    state, _ = make_state(tmp_path, "gpus:\n- profile: h100-sxm5-80gb\n  mig: dynamic\n")
    device = "gpu-0-mig-1g10gb-19-3"
    state.prepare(claim(UID1, [device]))
    spec = read_spec(state, UID1)
    host = Path(spec["devices"][0]["containerEdits"]["mounts"][0]["hostPath"])
    assert host.is_file() and host.name.startswith(f"{device}_MIG-")
    out = run_smi(container_root(tmp_path, [spec]), "-L").stdout
    assert host.name.split("_", 1)[1] in out and "MIG 1g.10gb" in out
    state.unprepare(UID1)
    assert not host.exists()  # the dynamic MIG device was destroyed, its info file too


def test_startup_restores_missing_files(a100: tuple[DeviceState, Any]) -> None:
    state, _ = a100
    state.prepare(claim(UID1, ["gpu-1"]))
    spec = read_spec(state, UID1)
    binary = Path(spec["containerEdits"]["mounts"][0]["hostPath"])
    library = Path(spec["containerEdits"]["mounts"][1]["hostPath"])
    info = Path(spec["devices"][0]["containerEdits"]["mounts"][0]["hostPath"])
    binary.unlink()
    library.unlink()
    info.write_text("garbage")
    state.startup()
    assert binary.read_bytes() == binary_bytes() and library.read_bytes() == library_bytes()
    assert "kind=gpu" in info.read_text()


def test_a_prepare_rewrites_files_someone_changed_since(a100: tuple[DeviceState, Any]) -> None:
    """The plugin remembers which files it wrote (a stat per prepare, not a read): a file replaced
    or removed since is still noticed."""
    state, _ = a100
    state.prepare(claim(UID1, ["gpu-1"]))
    spec = read_spec(state, UID1)
    binary = Path(spec["containerEdits"]["mounts"][0]["hostPath"])
    info = Path(spec["devices"][0]["containerEdits"]["mounts"][0]["hostPath"])
    binary.write_text("#!/bin/sh\necho replaced\n")
    info.unlink()
    state.unprepare(UID1)
    state.prepare(claim(UID2, ["gpu-1"]))
    assert binary.read_bytes() == binary_bytes()
    assert "kind=gpu" in info.read_text()


def test_a_prepare_writes_its_files_outside_the_node_lock_and_a_retry_mends_them(
    a100: tuple[DeviceState, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files are made sure of by each call after its batch (not in the batch's serial part)
    and before the answer; a failure there fails the call, and the kubelet's retry of the
    prepared claim writes them."""
    state, _ = a100
    nvidia_smi = state.nvidia_smi
    assert nvidia_smi is not None
    ensure = nvidia_smi.ensure_files
    held: list[bool] = []

    def watched(spec: Any) -> None:
        held.append(state._serializer._mutex.locked())
        ensure(spec)

    monkeypatch.setattr(nvidia_smi, "ensure_files", watched)
    state.prepare(claim(UID1, ["gpu-1"]))
    assert held == [False]
    info = Path(read_spec(state, UID1)["devices"][0]["containerEdits"]["mounts"][0]["hostPath"])
    assert "kind=gpu" in info.read_text()

    def failing(spec: Any) -> None:
        raise OSError(28, "No space left on device")

    info.unlink()
    monkeypatch.setattr(nvidia_smi, "ensure_files", failing)
    with pytest.raises(ClaimError, match=r"prepare devices failed: nvidia-smi files: .*No space left"):
        state.prepare(claim(UID1, ["gpu-1"]))
    monkeypatch.setattr(nvidia_smi, "ensure_files", watched)
    state.prepare(claim(UID1, ["gpu-1"]))  # prepared already: its files made sure of again
    assert "kind=gpu" in info.read_text()


def test_startup_removes_info_files_no_claim_mounts(tmp_path: Path) -> None:
    state, _ = make_state(tmp_path, "gpus:\n- profile: h100-sxm5-80gb\n  mig: dynamic\n")
    state.prepare(claim(UID1, ["gpu-0-mig-1g10gb-19-3"]))
    kept = Path(read_spec(state, UID1)["devices"][0]["containerEdits"]["mounts"][0]["hostPath"])
    # A plugin killed after destroying a MIG device but before dropping its claim leaves this.
    orphan = kept.with_name("gpu-0-mig-1g10gb-19-4_MIG-00000000-0000-0000-0000-000000000000")
    orphan.write_text("kind=mig\n")
    assert state.startup().driver_files_removed == 1
    assert kept.is_file() and not orphan.exists()


def test_binary_is_static() -> None:
    """nvidia-smi runs in images without a C library (the kind lane's busybox pods): an ELF
    executable without an interpreter (PT_INTERP) and without dynamic section (PT_DYNAMIC)."""
    data = binary_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2  # 64-bit
    phoff, phentsize, phnum = (
        int.from_bytes(data[o : o + n], "little") for o, n in ((0x20, 8), (0x36, 2), (0x38, 2))
    )
    types = {
        int.from_bytes(data[phoff + i * phentsize : phoff + i * phentsize + 4], "little")
        for i in range(phnum)
    }
    assert 1 in types and not types & {2, 3}  # PT_LOAD; no PT_DYNAMIC, no PT_INTERP


def test_start_up_removes_temp_files_of_interrupted_live_writes(tmp_path: Path) -> None:
    """A plugin killed while rewriting a live file leaves its temp file; the next start removes it
    (the kill soak checks the plugin directory for temp files)."""
    state, inventory = make_state(tmp_path, "gpus:\n- profile: h100-sxm5-80gb\n  count: 1\n")
    smi = state.nvidia_smi
    assert smi is not None
    smi.ensure_tools()
    uuid = inventory.gpu(0).uuid
    smi.write_live({uuid: {"utilization": 5}})
    leftover = smi.live_dir / uuid / ".state.0123456789ab.tmp"
    leftover.write_text("partial")
    assert state.startup().driver_files_removed == 1
    assert sorted(p.name for p in (smi.live_dir / uuid).iterdir()) == ["state"]


def test_live_directories_outlive_their_files_and_replace_the_old_layout(tmp_path: Path) -> None:
    """write_live keeps a device's live directory when its file goes (a running container mounts the
    directory: a new one would not show in it); a live file of the layout before per-device
    directories (live/<uuid> a file) is replaced by the directory, its counters still read once;
    the start-up sweep removes directories of devices that no longer exist (a destroyed dynamic MIG
    device, a share) that no claim mounts."""
    state, inventory = make_state(tmp_path, "gpus:\n- profile: h100-sxm5-80gb\n  count: 2\n")
    smi = state.nvidia_smi
    assert smi is not None
    first, second = (gpu.uuid for gpu in inventory.gpus)
    smi.ensure_tools()
    (smi.live_dir / first).write_text("energy_mj=42\n")  # what an older plugin left
    assert smi.read_live(first) == {"energy_mj": "42"}
    smi.write_live({first: {"utilization": 5}, second: {"utilization": 7}, "share-gone": {"utilization": 1}})
    assert smi.read_live(first) == {"utilization": "5"} and (smi.live_dir / first).is_dir()
    smi.write_live({first: {"utilization": 6}})
    assert (smi.live_dir / second).is_dir() and not smi.live_path(second).exists()
    assert state.startup().driver_files_removed == 1  # share-gone: no device, no claim
    assert sorted(p.name for p in smi.live_dir.iterdir()) == sorted([first, second])
