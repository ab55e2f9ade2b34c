"""`dra-fake device-plugin`: NVIDIA's config and flags, resources under the MIG strategies and
sharing, health checks, and the refusal of a node whose DRA plugin is registered. Preferred
allocation is in tests/test_deviceplugin_preferred.py, Allocate and the gRPC servers against a
stand-in kubelet in tests/test_deviceplugin_serving.py, the per-node config in
tests/test_deviceplugin_configmanager.py (the real kubelet: e2e/test_device_plugin.py on kind); the
node they share in tests/devicepluginnode.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_fake.deviceplugin.config import (
    ConfigError,
    Flags,
    PluginConfig,
    Sharing,
    resolve,
)
from dra_fake.deviceplugin.plugin import dra_plugin_registered, health_checks
from dra_fake.deviceplugin.resources import build_resources
from dra_fake.deviceplugin.server import unhealthy_uuids
from dra_fake.gpu.devices import gpu_uuid
from tests.devicepluginnode import A100_STATIC, NODE, TIME_SLICING, inventory

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
