"""`dra-fake device-plugin` serving: Allocate per device-list strategy (MPS, the CDI spec), and the gRPC
servers against a stand-in kubelet (registration, re-registration, ListAndWatch, nvidia-smi's view
of the envvar answer, an index answer refused while the host shows a real GPU; the real kubelet:
e2e/test_device_plugin.py on kind)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from dra_fake.core import cdi
from dra_fake.deviceplugin.allocate import AllocationError, cdi_spec, container_response
from dra_fake.deviceplugin.config import (
    Flags,
    PluginConfig,
    Sharing,
    resolve,
)
from dra_fake.deviceplugin.resources import build_resources
from dra_fake.deviceplugin.server import DeviceHealth, DevicePlugins
from dra_fake.gpu.devices import gpu_uuid
from dra_fake.gpu.nvidia_smi import NvidiaSmi, binary_bytes, library_bytes, library_dirs
from dra_fake.kubelet.pb.deviceplugin.v1beta1 import api_pb2 as pb
from dra_fake.kubelet.pb.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from e2e.standin_kubelet import StandInKubelet
from tests.devicepluginnode import A100_STATIC, NODE, TIME_SLICING, inventory

# ---- Allocate -----------------------------------------------------------------------------------


@pytest.fixture
def smi(tmp_path: Path) -> NvidiaSmi:
    inv = inventory()
    s = NvidiaSmi.from_inventory(tmp_path / "data", inv)
    s.ensure_tools()
    return s


def test_allocate_per_strategy(smi: NvidiaSmi) -> None:
    [gpus] = build_resources(inventory(), PluginConfig())
    ids = [gpus.devices[2].id, gpus.devices[5].id]
    env = container_response(gpus, ids, PluginConfig(), smi)
    assert env.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)} and not env.cdi_devices
    mounted = {m.container_path for m in env.mounts}
    assert "/usr/bin/nvidia-smi" in mounted and len([p for p in mounted if "/devices/" in p]) == 2
    assert {f"{d}/libnvidia-ml.so.1" for d in library_dirs()} <= mounted  # the same mounts as a claim's
    index = container_response(gpus, ids, PluginConfig(device_id_strategy="index"), smi)
    assert index.envs["NVIDIA_VISIBLE_DEVICES"] == "2,5"
    volumes = container_response(gpus, ids, PluginConfig(device_list_strategy=("volume-mounts",)), None)
    assert volumes.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.container_path, m.host_path) for m in volumes.mounts] == [
        (f"/var/run/nvidia-container-devices/{i}", "/dev/null") for i in ids
    ]
    both = PluginConfig(device_list_strategy=("cdi-annotations", "cdi-cri"))
    cdi_answer = container_response(gpus, ids, both, smi, annotation_id="x")
    names = [f"k8s.device-plugin.nvidia.com/gpu={i}" for i in ids]
    assert cdi_answer.cdi_devices == names and not cdi_answer.envs and not cdi_answer.mounts
    assert cdi_answer.annotations == {"cdi.k8s.io/nvidia-device-plugin_x": ",".join(names)}
    mixed = container_response(gpus, ids, PluginConfig(device_list_strategy=("envvar", "cdi-cri")), smi)
    assert mixed.envs == env.envs and mixed.cdi_devices == names and not mixed.mounts  # the spec mounts


def test_allocate_validation_and_replicas(smi: NvidiaSmi) -> None:
    shared = Sharing("time-slicing", False, True, resolve(Flags(), TIME_SLICING).sharing.resources)
    [gpus] = build_resources(inventory(), PluginConfig(sharing=shared))
    with pytest.raises(
        AllocationError,
        match=r'^invalid allocation request for "nvidia.com/gpu": invalid request: '
        r"maximum request size for shared resources is 1; found 2$",
    ):
        container_response(gpus, [gpus.devices[0].id, gpus.devices[1].id], PluginConfig(), smi)
    with pytest.raises(AllocationError, match="invalid request: unknown device: GPU-nope"):
        container_response(gpus, ["GPU-nope"], PluginConfig(), smi)
    lenient = build_resources(
        inventory(), PluginConfig(sharing=Sharing("time-slicing", False, False, shared.resources))
    )[0]
    answer = container_response(lenient, [lenient.devices[0].id, lenient.devices[1].id], PluginConfig(), smi)
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == gpu_uuid(NODE, 0)  # two replicas of one GPU: one GPU


def test_mps_sets_the_pipe_directory(smi: NvidiaSmi) -> None:
    config = resolve(
        Flags(mps_root="/run/nvidia/mps"), "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}"
    )
    [gpus] = build_resources(inventory(), config)
    answer = container_response(gpus, [gpus.devices[0].id], config, smi)
    assert answer.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia/mps/gpu/pipe"


def test_cdi_spec_is_valid_and_names_devices_by_id_strategy(smi: NvidiaSmi) -> None:
    resources = build_resources(inventory(A100_STATIC), PluginConfig(mig_strategy="mixed"))
    for strategy, first in (("uuid", gpu_uuid(NODE, 0)), ("index", "0")):
        spec = cdi_spec(resources, PluginConfig(device_id_strategy=strategy), smi, None)
        cdi.validate_spec(spec)
        assert spec["kind"] == "k8s.device-plugin.nvidia.com/gpu" and spec["devices"][0]["name"] == first
        assert len(spec["devices"]) == 4  # 1 GPU + 3 MIG devices
    assert [
        d["name"] for d in cdi_spec(resources, PluginConfig(device_id_strategy="index"), smi, None)["devices"]
    ] == [
        "0",
        "1:0",
        "1:1",
        "1:2",
    ]


# ---- the gRPC servers against a stand-in kubelet ------------------------------------------------


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))  # unix socket paths are short
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_registers_serves_and_re_registers_after_a_kubelet_restart(plugin_dir: Path, smi: NvidiaSmi) -> None:
    kubelet = StandInKubelet(plugin_dir)
    health = DeviceHealth()
    resources = build_resources(inventory(A100_STATIC), PluginConfig(mig_strategy="mixed"))
    plugins = DevicePlugins(
        resources, PluginConfig(mig_strategy="mixed"), str(plugin_dir / "kubelet.sock"), health, smi
    )
    try:
        plugins.start()
        assert [(v, e, n) for v, e, n, _ in kubelet.registered] == [
            ("v1beta1", "nvidia-gpu.sock", "nvidia.com/gpu"),
            ("v1beta1", "nvidia-mig-1g.5gb.sock", "nvidia.com/mig-1g.5gb"),
            ("v1beta1", "nvidia-mig-3g.20gb.sock", "nvidia.com/mig-3g.20gb"),
        ]
        assert kubelet.registered[0][3].get_preferred_allocation_available
        assert kubelet.first_list["nvidia.com/gpu"] == [(gpu_uuid(NODE, 0), "Healthy")]
        assert oct(os.stat(plugin_dir / "nvidia-gpu.sock").st_mode & 0o777) == "0o660"

        with grpc.insecure_channel(f"unix://{plugin_dir / 'nvidia-mig-1g.5gb.sock'}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            stream = stub.ListAndWatch(pb.Empty(), timeout=30)
            first = next(stream)
            mig0 = first.devices[0].ID
            health.mark({mig0})
            second = next(stream)
            assert [(d.ID, d.health) for d in second.devices] == [
                (mig0, "Unhealthy"),
                (first.devices[1].ID, "Healthy"),
            ]
            answer = stub.Allocate(
                pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[mig0])])
            )
            assert answer.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == mig0
            with pytest.raises(grpc.RpcError, match="unknown device: MIG-x"):
                stub.Allocate(
                    pb.AllocateRequest(
                        container_requests=[pb.ContainerAllocateRequest(devices_ids=["MIG-x"])]
                    )
                )
            pref = stub.GetPreferredAllocation(
                pb.PreferredAllocationRequest(
                    container_requests=[
                        pb.ContainerPreferredAllocationRequest(
                            available_deviceIDs=[d.ID for d in first.devices], allocation_size=1
                        )
                    ]
                )
            )
            assert list(pref.container_responses[0].deviceIDs) == [mig0]
            with pytest.raises(grpc.RpcError, match="not enough available devices to satisfy allocation"):
                stub.GetPreferredAllocation(
                    pb.PreferredAllocationRequest(
                        container_requests=[
                            pb.ContainerPreferredAllocationRequest(
                                available_deviceIDs=[mig0], allocation_size=2
                            )
                        ]
                    )
                )

        # the kubelet restarts: its socket is re-created, the plugins serve and register again
        assert not plugins.kubelet_restarted()
        kubelet.stop()
        kubelet = StandInKubelet(plugin_dir)
        assert plugins.kubelet_restarted()
        plugins.start()
        assert len(kubelet.registered) == 3 and not plugins.kubelet_restarted()
    finally:
        health.close()
        plugins.stop()
        kubelet.stop()


def test_envvar_answer_gives_nvidia_smi_exactly_the_allocated_gpus(tmp_path: Path, smi: NvidiaSmi) -> None:
    """The mounts an envvar answer carries (what the NVIDIA runtime would add) make the in-pod
    nvidia-smi list exactly the allocated GPUs."""
    [gpus] = build_resources(inventory(), PluginConfig())
    for d in gpus.devices:
        smi.write_info(d.device, d.uuid)
    # the same device file as the DRA driver's (docs/nvml.md), from the same code
    written = smi.info_path(gpus.devices[1].device.name, gpus.devices[1].uuid).read_text()
    assert written == smi.info_text(gpus.devices[1].device, gpus.devices[1].uuid)
    assert "vbios_version=96.00.99.00.01\n" in written and "temp_shutdown=95\n" in written
    answer = container_response(gpus, [gpus.devices[6].id, gpus.devices[1].id], PluginConfig(), smi)
    root = tmp_path / "ctr"
    for m in answer.mounts:
        target = root / m.container_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(m.host_path).is_dir():
            target.symlink_to(m.host_path)
        else:
            shutil.copy(m.host_path, target)
    assert (root / "usr/bin/nvidia-smi").read_bytes() == binary_bytes()
    assert (root / library_dirs()[0].lstrip("/") / "libnvidia-ml.so.1").read_bytes() == library_bytes()
    out = subprocess.run(
        [str(root / "usr/bin/nvidia-smi"), "-L"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DRA_FAKE_ROOT": str(root)},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout == (
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {gpu_uuid(NODE, 1)})\n"
        f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {gpu_uuid(NODE, 6)})\n"
    )


def test_stream_ends_when_the_plugin_stops(plugin_dir: Path, smi: NvidiaSmi) -> None:
    kubelet = StandInKubelet(plugin_dir)
    health = DeviceHealth()
    resources = build_resources(inventory(), PluginConfig())
    plugins = DevicePlugins(resources, PluginConfig(), str(plugin_dir / "kubelet.sock"), health, smi)
    plugins.start()
    started, ended = threading.Event(), threading.Event()

    def watch() -> None:
        with grpc.insecure_channel(f"unix://{plugin_dir / 'nvidia-gpu.sock'}") as channel:
            for _ in pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=60):
                started.set()
        ended.set()  # the stream ended normally: no error raised above

    threading.Thread(target=watch, daemon=True).start()
    assert started.wait(30)
    health.close()  # the plugin stops: its streams end (the kubelet then sees the plugin gone)
    assert ended.wait(30)
    plugins.stop(1)
    kubelet.stop()


def test_dra_plugin_refuses_a_node_a_device_plugin_serves() -> None:
    from dra_fake.gpu.configs import FeatureGates
    from dra_fake.gpu.devnodes import DeviceNodePolicy
    from dra_fake.gpu.plugin import GpuDriver, device_plugin_resources

    node: dict[str, Any] = {
        "metadata": {"name": NODE},
        "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "4"}},
    }
    assert device_plugin_resources(node) == ["nvidia.com/gpu"]
    assert device_plugin_resources({"status": {"allocatable": {"nvidia.com/gpu": "0"}}}) == []
    driver = GpuDriver("gpu.nvidia.com", inventory(), FeatureGates(frozenset()), DeviceNodePolicy("never"))
    refusal = driver.refusal(node)
    assert refusal is not None and "advertises nvidia.com/gpu through a device plugin" in refusal
    allowed = GpuDriver("gpu.nvidia.com", inventory(), FeatureGates(frozenset()), DeviceNodePolicy("never"),
                        allow_device_plugin=True)  # fmt: skip
    assert allowed.refusal(node) is None and driver.refusal({"metadata": {"name": NODE}}) is None


def test_an_index_answer_is_refused_at_allocate_while_the_host_shows_a_real_gpu(
    plugin_dir: Path, smi: NvidiaSmi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deviceIDStrategy index hands out NVIDIA_VISIBLE_DEVICES=0,1, which NVIDIA's runtime on a real
    GPU node serves as the real GPUs: decided at every Allocate (a driver may load after start)."""
    from dra_fake.core import nvidiahost

    pci, modules = tmp_path / "pci", tmp_path / "module"
    (pci / "0000:00:01.0").mkdir(parents=True)
    (pci / "0000:00:01.0" / "vendor").write_text("0x8086\n")
    (modules / "ext4").mkdir(parents=True)
    monkeypatch.setattr(nvidiahost, "HOST", nvidiahost.HostPaths(pci, modules, tmp_path / "proc-nvidia"))
    StandInKubelet(plugin_dir)
    config = PluginConfig(device_id_strategy="index")
    resources = build_resources(inventory(), config)
    plugins = DevicePlugins(resources, config, str(plugin_dir / "kubelet.sock"), DeviceHealth(), smi)
    ids = [resources[0].devices[0].id]
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
    try:
        plugins.start()
        with grpc.insecure_channel(f"unix://{plugin_dir / 'nvidia-gpu.sock'}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            assert (
                stub.Allocate(request, timeout=30).container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"]
                == "0"
            )
            (modules / "nvidia").mkdir()  # the real driver loads
            with pytest.raises(
                grpc.RpcError, match="deviceIDStrategy index refused: the NVIDIA driver is loaded"
            ):
                stub.Allocate(request, timeout=30)
    finally:
        plugins.stop()
