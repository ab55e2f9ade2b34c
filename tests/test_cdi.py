"""CDI spec building, minimum versions, strict schema and spec files (dra_fake.cdi)."""

from __future__ import annotations

import copy
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_fake.core import cdi
from dra_fake.gpu import edits
from dra_fake.gpu.configresolve import AppliedSharing, MpsSettings
from tests.cdibed import DRIVER, GPU, MIG, UID_DIGIT, UID_LETTER, spec_device


def claim_spec(uid: str = UID_LETTER) -> dict[str, Any]:
    return edits.build_claim_spec(DRIVER, uid, [spec_device(uid, GPU), spec_device(uid, MIG)])


# --- names -------------------------------------------------------------------------------------


def test_names() -> None:
    assert cdi.claim_kind(DRIVER) == "k8s.gpu.nvidia.com/claim"
    assert cdi.spec_file_name(DRIVER, UID_DIGIT) == f"k8s.gpu.nvidia.com-claim_{UID_DIGIT}.yaml"
    assert cdi.cdi_device_name(UID_DIGIT, "gpu-0") == f"{UID_DIGIT}-gpu-0"
    assert cdi.cdi_device_name(UID_DIGIT, "gpu-0", "share1") == f"{UID_DIGIT}-gpu-0-share1"
    assert cdi.cdi_device_id(DRIVER, f"{UID_DIGIT}-gpu-0") == f"k8s.gpu.nvidia.com/claim={UID_DIGIT}-gpu-0"
    assert edits.env_id("gpu-2-mig-1g10gb-9-0") == "GPU_2_MIG_1G10GB_9_0"
    with pytest.raises(cdi.CdiSpecError):
        cdi.cdi_device_name(UID_DIGIT, "gpu-0-")


# --- spec content ------------------------------------------------------------------------------


def test_spec_is_schema_valid_and_env_only() -> None:
    spec = claim_spec()
    cdi.validate_spec(spec)
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert [d["name"] for d in spec["devices"]] == [
        f"{UID_LETTER}-gpu-0",
        f"{UID_LETTER}-gpu-1-mig-1g5gb-19-3",
    ]
    for container_edits in [spec["containerEdits"]] + [d["containerEdits"] for d in spec["devices"]]:
        assert list(container_edits) == [
            "env"
        ]  # no deviceNodes, mounts or hooks: nothing to stat on the host
        assert all("=" in e and not e.startswith("=") for e in container_edits["env"])
    assert spec["containerEdits"]["env"] == [
        "NVIDIA_VISIBLE_DEVICES=void",  # as NVIDIA's spec: never real GPUs by name
        "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64",
        f"DRA_FAKE_VISIBLE_DEVICES={GPU.uuid},MIG-1234",
        f"DRA_FAKE_CLAIM_UID={UID_LETTER}",
    ]


def test_device_env_gpu_and_mig() -> None:
    assert edits.device_env(spec_device(UID_LETTER, GPU)) == [
        "DRA_FAKE_GPU_0_DEVICE=gpu-0",
        f"DRA_FAKE_GPU_0_UUID={GPU.uuid}",
        "DRA_FAKE_GPU_0_TYPE=gpu",
        "DRA_FAKE_GPU_0_PRODUCT_NAME=NVIDIA A100-SXM4-40GB",
        "DRA_FAKE_GPU_0_PCI_BUS_ID=0000:10:00.0",
        f"DRA_FAKE_GPU_0_MEMORY_BYTES={40 * 1024**3}",
    ]
    env = edits.device_env(spec_device(UID_LETTER, MIG, admin_access=True))
    assert "DRA_FAKE_GPU_1_MIG_1G5GB_19_3_MIG_PROFILE=1g.5gb" in env
    assert f"DRA_FAKE_GPU_1_MIG_1G5GB_19_3_PARENT_UUID={MIG.gpu_uuid}" in env
    assert "DRA_FAKE_GPU_1_MIG_1G5GB_19_3_MIG_PLACEMENT_START=3" in env
    assert "DRA_FAKE_GPU_1_MIG_1G5GB_19_3_MIG_DYNAMIC=false" in env
    assert "DRA_FAKE_GPU_1_MIG_1G5GB_19_3_ADMIN_ACCESS=true" in env


def test_device_env_sharing() -> None:
    ts = edits.device_env(
        spec_device(UID_LETTER, GPU, sharing=AppliedSharing("TimeSlicing", time_slice_interval="Short"))
    )
    assert ts[-3:] == [
        "DRA_FAKE_GPU_0_SHARING_STRATEGY=TimeSlicing",
        "DRA_FAKE_GPU_0_TIMESLICE_INTERVAL=Short",
        "DRA_FAKE_TIMESLICE_INTERVAL=Short",
    ]
    mps = AppliedSharing(
        "MPS",
        mps=MpsSettings(
            "mps-control-daemon-x-12345", ("GPU-a", "GPU-b"), 40, (("GPU-a", "1024M"), ("GPU-b", "512M"))
        ),
    )
    env = edits.device_env(spec_device(UID_LETTER, GPU, sharing=mps))
    assert env[-5:] == [
        "DRA_FAKE_GPU_0_SHARING_STRATEGY=MPS",
        "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=GPU-a=1024M,GPU-b=512M",
        "DRA_FAKE_MPS_CONTROL_DAEMON=mps-control-daemon-x-12345",
    ]


def test_duplicate_devices_collapse() -> None:
    d = spec_device(UID_LETTER, GPU)
    spec = edits.build_claim_spec(DRIVER, UID_LETTER, [d, d])
    assert len(spec["devices"]) == 1


# --- minimum version ---------------------------------------------------------------------------


def base(name: str = "gpu-0", kind: str = "k8s.gpu.nvidia.com/claim", **edits: Any) -> dict[str, Any]:
    return {
        "cdiVersion": "1.1.0",
        "kind": kind,
        "devices": [{"name": name, "containerEdits": {"env": ["A=1"], **edits}}],
    }


VERSIONS: dict[str, tuple[dict[str, Any], str]] = {
    "env only": (base(), "0.3.0"),
    "device name starts with a digit": (base("0abc-gpu-0"), "0.5.0"),
    "claim UID starting with a letter": (claim_spec(UID_LETTER), "0.3.0"),
    "claim UID starting with a digit": (claim_spec(UID_DIGIT), "0.5.0"),
    "mount type": (base(mounts=[{"hostPath": "/a", "containerPath": "/b", "type": "bind"}]), "0.4.0"),
    "mount without type": (base(mounts=[{"hostPath": "/a", "containerPath": "/b"}]), "0.3.0"),
    "deviceNode hostPath": (base(deviceNodes=[{"path": "/dev/x", "hostPath": "/dev/y"}]), "0.5.0"),
    "spec annotations": ({**base(), "annotations": {"a": "b"}}, "0.6.0"),
    "dot in class": (base(kind="k8s.gpu.nvidia.com/claim.v2"), "0.6.0"),
    "dots only in vendor": (base(kind="a.b.c/claim"), "0.3.0"),
    "additionalGids": (base(additionalGids=[5]), "0.7.0"),
    "intelRdt": (base(intelRdt={"closID": "x"}), "0.7.0"),
    "intelRdt schemata": (base(intelRdt={"schemata": ["L3:0=f"]}), "1.1.0"),
    "intelRdt enableMonitoring": (base(intelRdt={"enableMonitoring": True}), "1.1.0"),
    "netDevices": (base(netDevices=[{"hostInterfaceName": "eth1", "name": "net1"}]), "1.1.0"),
}


@pytest.mark.parametrize("spec,version", VERSIONS.values(), ids=VERSIONS.keys())
def test_minimum_version(spec: dict[str, Any], version: str) -> None:
    assert cdi.minimum_version(spec) == version
    cdi.validate_spec({**spec, "cdiVersion": version})


def test_device_annotations_need_060() -> None:
    spec = base()
    spec["devices"][0]["annotations"] = {"k": "v"}
    assert cdi.minimum_version(spec) == "0.6.0"


# --- schema rejects ----------------------------------------------------------------------------


def mutate(change: Any) -> dict[str, Any]:
    spec = copy.deepcopy(base())
    spec["cdiVersion"] = "0.5.0"
    change(spec)
    return spec


INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "missing devices": (mutate(lambda s: s.pop("devices")), "'devices' is a required property"),
    "no devices": (mutate(lambda s: s.update(devices=[])), "should be non-empty"),
    "missing cdiVersion": (mutate(lambda s: s.pop("cdiVersion")), "'cdiVersion' is a required property"),
    "missing kind": (mutate(lambda s: s.pop("kind")), "'kind' is a required property"),
    "unknown version": (mutate(lambda s: s.update(cdiVersion="0.9.0")), "does not match"),
    "kind without class": (mutate(lambda s: s.update(kind="k8s.gpu.nvidia.com")), "does not match"),
    "vendor starting with a digit": (mutate(lambda s: s.update(kind="8s.gpu/claim")), "does not match"),
    "class ending with a dash": (mutate(lambda s: s.update(kind="k8s.gpu/claim-")), "does not match"),
    "class too long": (mutate(lambda s: s.update(kind="k8s.gpu/" + "c" * 64)), "does not match"),
    "device name ending with a dash": (
        mutate(lambda s: s["devices"][0].update(name="gpu-")),
        "does not match",
    ),
    "device name with a slash": (mutate(lambda s: s["devices"][0].update(name="a/b")), "does not match"),
    "device name empty": (mutate(lambda s: s["devices"][0].update(name="")), "does not match"),
    "device without name": (mutate(lambda s: s["devices"][0].pop("name")), "'name' is a required property"),
    "device without edits": (
        mutate(lambda s: s["devices"][0].pop("containerEdits")),
        "'containerEdits' is a required property",
    ),
    "empty device edits": (mutate(lambda s: s["devices"][0].update(containerEdits={})), "is not valid"),
    "device edits with empty env": (
        mutate(lambda s: s["devices"][0].update(containerEdits={"env": []})),
        "is not valid",
    ),
    "unknown top-level field": (
        mutate(lambda s: s.update(extra=1)),
        "Additional properties are not allowed ('extra' was unexpected)",
    ),
    "unknown device field": (
        mutate(lambda s: s["devices"][0].update(env=["A=1"])),
        "Additional properties are not allowed ('env' was unexpected)",
    ),
    "unknown edits field": (
        mutate(lambda s: s["devices"][0]["containerEdits"].update(devices=[])),
        "at devices/0/containerEdits: Additional properties are not allowed ('devices' was unexpected)",
    ),
    "env without =": (
        mutate(lambda s: s["devices"][0]["containerEdits"].update(env=["A"])),
        "does not match",
    ),
    "env with empty key": (
        mutate(lambda s: s["devices"][0]["containerEdits"].update(env=["=1"])),
        "does not match",
    ),
    "device node without path": (
        mutate(lambda s: s.update(containerEdits={"deviceNodes": [{"hostPath": "/dev/x"}]})),
        "'path' is a required property",
    ),
    "unknown hook name": (
        mutate(lambda s: s.update(containerEdits={"hooks": [{"hookName": "preStart", "path": "/bin/x"}]})),
        "is not one of",
    ),
    "version too low for content": (
        mutate(lambda s: s.update(cdiVersion="0.3.0", annotations={"a": "b"})),
        "cdiVersion 0.3.0 is lower than the required 0.6.0",
    ),
    "duplicate device names": (
        mutate(lambda s: s["devices"].append(copy.deepcopy(s["devices"][0]))),
        "device 'gpu-0' defined more than once",
    ),
}


@pytest.mark.parametrize("spec,fragment", INVALID.values(), ids=INVALID.keys())
def test_schema_rejects(spec: dict[str, Any], fragment: str) -> None:
    with pytest.raises(cdi.CdiSpecError) as err:
        cdi.validate_spec(spec)
    assert fragment in str(err.value)


def test_leading_v_version_accepted() -> None:
    cdi.validate_spec(mutate(lambda s: s.update(cdiVersion="v0.5.0")))


# --- files -------------------------------------------------------------------------------------


def test_write_is_atomic_0644_and_round_trips(tmp_path: Path) -> None:
    store = cdi.CdiSpecStore(tmp_path / "cdi", DRIVER)
    spec = claim_spec(UID_DIGIT)
    path = store.write(UID_DIGIT, spec)
    assert path == tmp_path / "cdi" / f"k8s.gpu.nvidia.com-claim_{UID_DIGIT}.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in (tmp_path / "cdi").iterdir()] == [path.name]  # no temp file left
    assert yaml.safe_load(path.read_text()) == spec
    assert path.read_text().startswith("---\ncdiVersion: 0.5.0\n")
    assert store.read(UID_DIGIT) == spec
    # rewriting replaces the file (new inode), still no temp files
    inode = path.stat().st_ino
    store.write(UID_DIGIT, spec)
    assert path.stat().st_ino != inode
    assert len(list((tmp_path / "cdi").iterdir())) == 1


def test_invalid_spec_is_not_written(tmp_path: Path) -> None:
    store = cdi.CdiSpecStore(tmp_path, DRIVER)
    bad = claim_spec()
    bad["devices"][0]["containerEdits"] = {}
    with pytest.raises(cdi.CdiSpecError):
        store.write(UID_LETTER, bad)
    assert list(tmp_path.iterdir()) == []


def test_remove_and_list(tmp_path: Path) -> None:
    store = cdi.CdiSpecStore(tmp_path, DRIVER)
    assert store.claim_uids() == []
    store.write(UID_DIGIT, claim_spec(UID_DIGIT))
    store.write(UID_LETTER, claim_spec(UID_LETTER))
    (tmp_path / "k8s.compute-domain.nvidia.com-claim_x.yaml").write_text("{}")  # another driver
    (tmp_path / "k8s.gpu.nvidia.com-claim_y.json").write_text("{}")  # not ours (json)
    (tmp_path / f".k8s.gpu.nvidia.com-claim_{UID_DIGIT}.yaml.abc123.tmp").write_text("partial")
    assert store.claim_uids() == [UID_DIGIT, UID_LETTER]
    assert store.remove(UID_DIGIT) is True
    assert store.remove(UID_DIGIT) is False  # missing is fine
    assert store.claim_uids() == [UID_LETTER]
    assert [p.name for p in store.remove_temp_files()] == [
        f".k8s.gpu.nvidia.com-claim_{UID_DIGIT}.yaml.abc123.tmp"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "k8s.compute-domain.nvidia.com-claim_x.yaml",
        f"k8s.gpu.nvidia.com-claim_{UID_LETTER}.yaml",
        "k8s.gpu.nvidia.com-claim_y.json",
    ]


def test_read_missing_or_garbage(tmp_path: Path) -> None:
    store = cdi.CdiSpecStore(tmp_path, DRIVER)
    assert store.read("nope") is None
    store.path("bad").write_text("{: not yaml")
    assert store.read("bad") is None


def test_a_device_s_edits_are_built_once_and_shared_by_every_claim_spec() -> None:
    """A device's containerEdits do not depend on the claim: later claims reuse the first one's
    (the same object, its YAML rendered once), unless the device differs in its UUID, access or
    sharing. A claim naming one device twice (shared) gets two objects: PyYAML would write one
    object twice as an anchor and an alias."""
    first = edits.build_claim_spec(DRIVER, UID_LETTER, [spec_device(UID_LETTER, GPU)])
    other_uid = "2b222222-2222-2222-2222-222222222222"
    second = edits.build_claim_spec(DRIVER, other_uid, [spec_device(other_uid, GPU)])
    assert second["devices"][0]["containerEdits"] is first["devices"][0]["containerEdits"]
    assert second["devices"][0]["name"] != first["devices"][0]["name"]
    admin = edits.build_claim_spec(DRIVER, other_uid, [spec_device(other_uid, GPU, admin_access=True)])
    assert admin["devices"][0]["containerEdits"] is not first["devices"][0]["containerEdits"]
    assert "DRA_FAKE_GPU_0_ADMIN_ACCESS=true" in admin["devices"][0]["containerEdits"]["env"]
    shared = [
        edits.SpecDevice(cdi.cdi_device_name(other_uid, GPU.name, share), GPU, GPU.uuid or "")
        for share in ("5e2b3c4d-0000-0000-0000-000000000001", "5e2b3c4d-0000-0000-0000-000000000002")
    ]
    twice = edits.build_claim_spec(DRIVER, other_uid, shared)
    a, b = (d["containerEdits"] for d in twice["devices"])
    assert a == b and a is not b
    text = cdi.render_spec(twice).decode()  # CHECK_ENV (conftest): compared with PyYAML too
    assert "&" not in text and "*" not in text
    for spec in (first, second, admin, twice):
        assert yaml.safe_load(cdi.render_spec(spec)) == spec
