"""`dra-fake device-plugin`: NVIDIA's config and flags, resources under the MIG strategies and
sharing, Allocate per device-list strategy, preferred allocation, and the gRPC servers against a
stand-in kubelet (the real kubelet: e2e/test_device_plugin.py on kind)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from dra_fake.core import cdi
from dra_fake.deviceplugin.allocate import (
    AllocationError,
    cdi_spec,
    container_response,
    preferred,
)
from dra_fake.deviceplugin.config import ConfigError, Flags, PluginConfig, Sharing, resolve
from dra_fake.deviceplugin.plugin import dra_plugin_registered, health_checks
from dra_fake.deviceplugin.resources import build_resources
from dra_fake.deviceplugin.server import DeviceHealth, DevicePlugins, unhealthy_uuids
from dra_fake.gpu.devices import gpu_uuid
from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.nvidia_smi import NvidiaSmi, script_text
from dra_fake.gpu.profiles import load_profiles
from dra_fake.kubelet.pb.deviceplugin.v1beta1 import api_pb2 as pb
from dra_fake.kubelet.pb.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

NODE = "node-a"
TIME_SLICING = """
version: v1
flags:
  migStrategy: none
  failOnInitError: true
  nvidiaDriverRoot: /
  plugin: {passDeviceSpecs: false, deviceListStrategy: envvar, deviceIDStrategy: uuid}
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""  # NVIDIA's documented example, with the flags section its chart writes
A100_STATIC = {
    "gpus": [
        {"profile": "h100-sxm5-80gb"},
        {
            "profile": "a100-sxm4-40gb",
            "mig": "static",
            "migDevices": [
                {"profile": "1g.5gb", "start": 0},
                {"profile": "1g.5gb", "start": 1},
                {"profile": "3g.20gb", "start": 4},
            ],
        },
    ]
}


def inventory(config: dict[str, Any] | None = None) -> Inventory:
    return build_inventory(
        parse_config(config or {"gpus": [{"profile": "h100-sxm5-80gb", "count": 8}]}, "t"),
        NODE,
        load_profiles(),
    )


# ---- configuration ------------------------------------------------------------------------------


def test_defaults_are_nvidias() -> None:
    config = resolve(Flags())
    assert (config.mig_strategy, config.fail_on_init_error, config.device_list_strategy) == (
        "none",
        True,
        ("envvar",),
    )
    assert (config.device_id_strategy, config.cdi_annotation_prefix) == ("uuid", "cdi.k8s.io/")
    assert config.sharing == Sharing()


def test_config_file_and_precedence() -> None:
    config = resolve(Flags(), TIME_SLICING)
    assert config.sharing.strategy == "time-slicing" and config.sharing.replicas("nvidia.com/gpu") == 4
    assert config.sharing.fail_requests_greater_than_one is False  # time-slicing: unset = false
    flagged = resolve(Flags(device_list_strategy="cdi-cri,envvar", mig_strategy="mixed"), TIME_SLICING)
    assert flagged.device_list_strategy == ("cdi-cri", "envvar") and flagged.mig_strategy == "mixed"
    mps = resolve(
        Flags(mps_root="/run/nvidia/mps"), "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}"
    )
    assert mps.sharing.strategy == "mps" and mps.sharing.fail_requests_greater_than_one is True  # MPS: true
    both = (
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 3}]},"
        " mps: {resources: [{name: gpu, replicas: 2}]}}"
    )
    assert resolve(Flags(mps_root="/m"), both).sharing.replicas("nvidia.com/gpu") == 2  # MPS wins


@pytest.mark.parametrize(
    ("flags", "text", "message"),
    [
        (Flags(), "version: v2", "unknown version: v2"),
        (Flags(mig_strategy="both"), None, "unknown MIG strategy: both"),
        (
            Flags(device_list_strategy="envvar,nfs"),
            None,
            "invalid --device-list-strategy option: invalid strategy: nfs",
        ),
        (Flags(device_id_strategy="serial"), None, "invalid --device-id-strategy option: serial"),
        (Flags(), "sharing: {timeSlicing: {renameByDefault: true}}", "no resources specified"),
        (Flags(), "sharing: {timeSlicing: {resources: [{replicas: 2}]}}", "no resource name specified"),
        (Flags(), "sharing: {timeSlicing: {resources: [{name: gpu}]}}", "no replicas specified"),
        (
            Flags(),
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1}]}}",
            "number of replicas must be >= 2",
        ),
        (
            Flags(),
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: some}]}}",
            "devices set as 'some' but the only valid string input is 'all'",
        ),
        (
            Flags(),
            "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}",
            "using MPS requires --mps-root to be specified",
        ),
        (
            Flags(mig_strategy="mixed", mps_root="/m"),
            "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}",
            "using --mig-strategy=mixed is not supported with MPS",
        ),
        (
            Flags(),
            "flags: {plugin: {deviceListStratgy: envvar}}",
            "flags.plugin: unknown field 'deviceListStratgy'",
        ),
        (Flags(), "sharing: [1]", "sharing: expected a mapping"),
        (Flags(), "{", "not YAML or JSON"),
    ],
)
def test_config_errors_are_nvidias_or_name_the_key(flags: Flags, text: str | None, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(flags, text)
    assert message in str(err.value)


# ---- resources ----------------------------------------------------------------------------------


def test_whole_gpus_are_nvidia_gpu_with_the_dra_views_uuids() -> None:
    [gpus] = build_resources(inventory(), PluginConfig())
    assert gpus.name == "nvidia.com/gpu" and gpus.socket_name == "nvidia-gpu.sock"
    assert [d.id for d in gpus.devices] == [gpu_uuid(NODE, i) for i in range(8)]
    assert [d.index for d in gpus.devices] == [str(i) for i in range(8)]
    assert gpus.devices[3].device.name == "gpu-3"


def test_mig_strategies() -> None:
    inv = inventory(A100_STATIC)
    none = build_resources(inv, PluginConfig(mig_strategy="none"))
    assert [(r.name, len(r.devices)) for r in none] == [("nvidia.com/gpu", 2)]  # the MIG GPU whole
    mixed = build_resources(inv, PluginConfig(mig_strategy="mixed"))
    assert [(r.name, [d.index for d in r.devices]) for r in mixed] == [
        ("nvidia.com/gpu", ["0"]),
        ("nvidia.com/mig-1g.5gb", ["1:0", "1:1"]),
        ("nvidia.com/mig-3g.20gb", ["1:2"]),
    ]
    assert all(d.id.startswith("MIG-") for r in mixed[1:] for d in r.devices)
    with pytest.raises(ConfigError, match="the same migEnabled value"):
        build_resources(inv, PluginConfig(mig_strategy="single"))
    one_profile = {
        "gpus": [
            {
                "profile": "a100-sxm4-40gb",
                "count": 2,
                "mig": "static",
                "migDevices": [{"profile": "1g.5gb", "start": 0}],
            }
        ]
    }
    [single] = build_resources(inventory(one_profile), PluginConfig(mig_strategy="single"))
    assert single.name == "nvidia.com/gpu" and [d.index for d in single.devices] == ["0:0", "1:0"]
    two = {"gpus": [A100_STATIC["gpus"][1]]}
    with pytest.raises(ConfigError, match="more than one MIG device type present on node"):
        build_resources(inventory(two), PluginConfig(mig_strategy="single"))
    with pytest.raises(ConfigError, match="dynamic MIG is a DRA driver feature"):
        build_resources(
            inventory({"gpus": [{"profile": "h100-sxm5-80gb", "mig": "dynamic"}]}), PluginConfig()
        )


def test_replicas_and_renaming() -> None:
    sharing = Sharing("time-slicing", False, False, resolve(Flags(), TIME_SLICING).sharing.resources)
    [gpus] = build_resources(
        inventory({"gpus": [{"profile": "t4", "count": 2}]}), PluginConfig(sharing=sharing)
    )
    uuid0 = gpu_uuid(NODE, 0)
    assert gpus.name == "nvidia.com/gpu" and gpus.replicas == 4
    assert [d.id for d in gpus.devices][:5] == [
        f"{uuid0}::0",
        f"{uuid0}::1",
        f"{uuid0}::2",
        f"{uuid0}::3",
        f"{gpu_uuid(NODE, 1)}::0",
    ]
    renamed = Sharing("time-slicing", True, False, sharing.resources)
    [shared] = build_resources(inventory({"gpus": [{"profile": "t4"}]}), PluginConfig(sharing=renamed))
    assert (shared.name, shared.socket_name) == ("nvidia.com/gpu.shared", "nvidia-gpu.shared.sock")


# ---- Allocate -----------------------------------------------------------------------------------


@pytest.fixture
def smi(tmp_path: Path) -> NvidiaSmi:
    inv = inventory()
    s = NvidiaSmi.from_inventory(tmp_path / "data", inv)
    s.ensure_script()
    return s


def test_allocate_per_strategy(smi: NvidiaSmi) -> None:
    [gpus] = build_resources(inventory(), PluginConfig())
    ids = [gpus.devices[2].id, gpus.devices[5].id]
    env = container_response(gpus, ids, PluginConfig(), smi)
    assert env.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)} and not env.cdi_devices
    mounted = {m.container_path for m in env.mounts}
    assert "/usr/bin/nvidia-smi" in mounted and len([p for p in mounted if "/devices/" in p]) == 2
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


def test_preferred_allocation() -> None:
    [gpus] = build_resources(inventory(), PluginConfig())
    ids = [d.id for d in gpus.devices]
    # GPUs 0,1 share a PCIe root, 2,3 the next: with 2 chosen, its root partner comes next
    assert preferred(gpus, ids, [ids[2]], 2) == [ids[2], ids[3]]
    assert preferred(gpus, ids[1:], [], 3) == [ids[1], ids[2], ids[3]]
    shared = Sharing("time-slicing", False, False, resolve(Flags(), TIME_SLICING).sharing.resources)
    [replicas] = build_resources(
        inventory({"gpus": [{"profile": "t4", "count": 2}]}), PluginConfig(sharing=shared)
    )
    r = [d.id for d in replicas.devices]  # 4 replicas of GPU 0, then of GPU 1
    # distributed: GPU 0 has 2 replicas in use, GPU 1 none: both picks from GPU 1 first, then balance
    assert preferred(replicas, r[2:4] + r[4:], [], 3) == [r[4], r[5], r[2]]


def test_health_checks_and_unhealthy_devices() -> None:
    assert health_checks("all") is None and health_checks("xids") is None
    assert health_checks("48,79") == frozenset({13, 31, 43, 45, 68, 109, 48, 79})
    inv = inventory(A100_STATIC)
    mig = next(d for d in inv.devices.values() if d.kind == "mig")
    assert unhealthy_uuids({mig.name: ("Unhealthy", "Xid 79"), "gpu-0": ("Unknown", "")}, inv.devices) == {
        mig.uuid,
        mig.gpu_uuid,  # NVIDIA maps events by the parent GPU (a whole-GPU advertisement turns unhealthy)
    }


def test_refuses_a_node_whose_dra_plugin_is_registered(tmp_path: Path) -> None:
    assert dra_plugin_registered(str(tmp_path), "gpu.nvidia.com") is None
    (tmp_path / "gpu.nvidia.com-0f1e-reg.sock").touch()
    (tmp_path / "compute-domain.nvidia.com-reg.sock").touch()
    assert dra_plugin_registered(str(tmp_path), "gpu.nvidia.com") == str(
        tmp_path / "gpu.nvidia.com-0f1e-reg.sock"
    )


# ---- the gRPC servers against a stand-in kubelet ------------------------------------------------


class FakeKubelet(pb_grpc.RegistrationServicer):
    """Registration as the kubelet serves it: records the request, dials the plugin back, reads its
    options and the first ListAndWatch answer (as the kubelet's device manager does)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.registered: list[Any] = []
        self.first_list: dict[str, list[tuple[str, str]]] = {}
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
        self.server.start()

    def Register(self, request: Any, context: Any) -> Any:
        with grpc.insecure_channel(f"unix://{self.directory / request.endpoint}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
            first = next(stub.ListAndWatch(pb.Empty(), timeout=10))
        self.first_list[request.resource_name] = [(d.ID, d.health) for d in first.devices]
        self.registered.append((request.version, request.endpoint, request.resource_name, options))
        return pb.Empty()

    def stop(self) -> None:
        self.server.stop(None).wait(5)


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))  # unix socket paths are short
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_registers_serves_and_re_registers_after_a_kubelet_restart(plugin_dir: Path, smi: NvidiaSmi) -> None:
    kubelet = FakeKubelet(plugin_dir)
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

        # the kubelet restarts: its socket is re-created, the plugins serve and register again
        assert not plugins.kubelet_restarted()
        kubelet.stop()
        kubelet = FakeKubelet(plugin_dir)
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
    assert (root / "usr/bin/nvidia-smi").read_text() == script_text()
    out = subprocess.run(
        [shutil.which("dash") or "sh", str(root / "usr/bin/nvidia-smi"), "-L"],
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
    kubelet = FakeKubelet(plugin_dir)
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
