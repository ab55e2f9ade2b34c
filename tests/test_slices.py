"""ResourceSlices and DeviceClasses shaped like NVIDIA's driver publishes them: golden files, the spec
and manifest per API version, values, DeviceClasses. Content checked against the reference is in
tests/test_slices_content.py.

Golden files: tests/golden/slices/*.yaml hold `render_slices` output for every built-in profile x
MIG mode x API version (x server 1.34/1.35 for dynamic MIG). After an intended change, regenerate
them with `UPDATE_GOLDEN=1 python -m pytest tests/test_slices.py` and review the diff.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_fake.core.slices import API_VERSIONS, DesiredSlice, canonical_quantity, slice_manifest, slice_spec
from dra_fake.gpu.deviceclasses import device_classes
from dra_fake.gpu.profiles import BUILTIN_PROFILE_IDS, load_profiles
from dra_fake.gpu.render import render_slices
from dra_fake.gpu.slices import desired_slices, semver
from tests.slicesbed import DRIVER, EXAMPLES_DIR, GOLDEN_DIR, STATIC_LAYOUT, UPDATE, inventory

# ---- golden files ------------------------------------------------------------------------------


def golden_cases() -> Iterator[tuple[str, dict[str, Any] | Path, str, tuple[int, int]]]:
    profiles = load_profiles()
    for pid in BUILTIN_PROFILE_IDS:
        profile = profiles[pid]
        configs: dict[str, dict[str, Any]] = {"none": {"gpus": [{"profile": pid, "count": 2}]}}
        if profile.mig_capable:
            by_id = {m.gi_profile_id: m.name for m in profile.mig_profiles}
            layout = [{"profile": by_id[gi], "start": start} for gi, start in STATIC_LAYOUT]
            configs["static"] = {
                "gpus": [{"profile": pid, "count": 2, "mig": "static", "migDevices": layout}]
            }
            if not profile.incomplete_mig_profiles():
                configs["dynamic"] = {"gpus": [{"profile": pid, "count": 2, "mig": "dynamic"}]}
        for mode, config in configs.items():
            for api in API_VERSIONS:
                if mode == "dynamic":
                    for server in ((1, 34), (1, 35)):
                        yield f"{pid}-{mode}-{api}-k8s{server[0]}.{server[1]}", config, api, server
                else:
                    yield f"{pid}-{mode}-{api}", config, api, (1, 34)
    for server in ((1, 34), (1, 35)):
        yield f"example-mixed-mig-v1-k8s1.{server[1]}", EXAMPLES_DIR / "mixed-mig.yaml", "v1", server
    yield from shares_cases()


def shares_cases() -> Iterator[tuple[str, dict[str, Any] | Path, str, tuple[int, int]]]:
    """Consumable shares (NVIDIA's ConsumableShares), each mode on full GPUs; every device kind
    in one inventory; the same fields in every API version (v1beta1 under `basic`)."""
    for mode in ("memory", "unlimited", "4"):
        config = {"gpus": [{"profile": "h100-sxm5-80gb", "count": 2, "consumableShares": mode}]}
        yield f"shares-{mode}-h100-v1", config, "v1", (1, 35)
    mixed = {
        "gpus": [
            {"profile": "h100-sxm5-80gb", "count": 1},
            {"profile": "h100-sxm5-80gb", "count": 1, "consumableShares": "memory"},
            {
                "profile": "h100-sxm5-80gb",
                "mig": "static",
                "migDevices": [{"profile": "3g.40gb", "start": 0}, {"profile": "1g.10gb", "start": 4}],
                "consumableShares": 2,
            },
            {"profile": "h100-sxm5-80gb", "mig": "dynamic", "consumableShares": "unlimited"},
        ]
    }
    for api in API_VERSIONS:
        yield f"shares-mixed-{api}-k8s1.35", mixed, api, (1, 35)


CASES = list(golden_cases())


def render_case(tmp_path: Path, config: dict[str, Any] | Path, api: str, server: tuple[int, int]) -> str:
    if isinstance(config, Path):
        return render_slices(config, "node-1", api, server)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return render_slices(path, "node-1", api, server)


@pytest.mark.parametrize(("name", "config", "api", "server"), CASES, ids=[c[0] for c in CASES])
def test_golden(
    tmp_path: Path, name: str, config: dict[str, Any] | Path, api: str, server: tuple[int, int]
) -> None:
    rendered = render_case(tmp_path, config, api, server)
    golden = GOLDEN_DIR / f"{name}.yaml"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered, encoding="utf-8")
    assert golden.exists(), f"missing {golden}; run UPDATE_GOLDEN=1 python -m pytest tests/test_slices.py"
    assert rendered == golden.read_text(encoding="utf-8")


def test_no_stale_golden_files() -> None:
    expected = {f"{c[0]}.yaml" for c in CASES}
    if UPDATE:
        for stale in {p.name for p in GOLDEN_DIR.glob("*.yaml")} - expected:
            (GOLDEN_DIR / stale).unlink()
    assert {p.name for p in GOLDEN_DIR.glob("*.yaml")} == expected
    assert len(expected) == 8 * 3 + 6 * 3 + 4 * 3 * 2 + 2 + 3 + 3


def golden_slices() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(GOLDEN_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            yield path.name, document


def flat_devices(slice_object: dict[str, Any]) -> list[dict[str, Any]]:
    devices = slice_object["spec"].get("devices", [])
    if slice_object["apiVersion"].endswith("v1beta1"):
        return [{"name": d["name"], **d["basic"]} for d in devices]
    return list(devices)


def test_golden_slices_respect_api_limits() -> None:
    checked = 0
    for name, obj in golden_slices():
        devices = flat_devices(obj)
        with_counters = any("consumesCounters" in d for d in devices)
        assert len(devices) <= (64 if with_counters else 128), name
        for device in devices:
            assert len(device["attributes"]) + len(device["capacity"]) <= 32, (name, device["name"])
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", device["name"]), device["name"]
            for attribute in device["attributes"].values():
                assert len(next(iter(attribute.values()))) <= 64
        counter_sets = obj["spec"].get("sharedCounters", [])
        if "k8s1.35" in name:
            assert not (counter_sets and devices), name  # 1.35+: counters and devices in separate slices
            assert len(counter_sets) <= 8 and all(len(c["counters"]) <= 32 for c in counter_sets)
        else:
            assert sum(len(c["counters"]) for c in counter_sets) <= 32, name
        checked += 1
    assert checked > 100


def test_golden_quantities_are_canonical() -> None:
    for name, obj in golden_slices():
        values = [c["value"] for d in flat_devices(obj) for c in d["capacity"].values()]
        values += [
            c["value"]
            for d in flat_devices(obj)
            for e in d.get("consumesCounters", [])
            for c in e["counters"].values()
        ]
        values += [c["value"] for s in obj["spec"].get("sharedCounters", []) for c in s["counters"].values()]
        for value in values:
            assert isinstance(value, str), (name, value)
            assert canonical_quantity(parse_quantity(value)) == value, (name, value)


def parse_quantity(text: str) -> int:
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G)?", text)
    assert match, text
    factor = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}
    return int(match[1]) * factor.get(match[2] or "", 1)


def test_golden_slices_list_devices_in_a_stable_sorted_order() -> None:
    for name, obj in golden_slices():
        names = [d["name"] for d in flat_devices(obj)]
        gpus = [int(n.split("-")[1]) for n in names]
        for gpu in set(gpus):  # within a GPU, by device name
            own = [n for n in names if int(n.split("-")[1]) == gpu]
            assert own == sorted(own), name


# ---- spec and manifest ---------------------------------------------------------------------------


def example_desired(tmp_path: Path) -> DesiredSlice:
    inv = inventory(tmp_path, {"gpus": [{"profile": "h100-sxm5-80gb", "mig": "dynamic"}]})
    return desired_slices(inv, DRIVER, (1, 34))[0]


def test_slice_spec_per_api_version(tmp_path: Path) -> None:
    desired = example_desired(tmp_path)
    before = copy.deepcopy(desired)
    common = {
        "driver": DRIVER,
        "pool_name": "node-1",
        "node_name": "node-1",
        "generation": 3,
        "slice_count": 2,
    }
    v1 = slice_spec(desired, api_version="v1", **common)  # type: ignore[arg-type]
    assert v1["pool"] == {"generation": 3, "name": "node-1", "resourceSliceCount": 2}
    assert (v1["driver"], v1["nodeName"]) == (DRIVER, "node-1")
    assert v1["devices"] == desired.devices and v1["sharedCounters"] == desired.shared_counters
    assert slice_spec(desired, api_version="v1beta2", **common) == v1  # type: ignore[arg-type]
    beta1 = slice_spec(desired, api_version="v1beta1", **common)  # type: ignore[arg-type]
    assert beta1["sharedCounters"] == v1["sharedCounters"]
    assert beta1["devices"][0] == {
        "name": "gpu-0",
        "basic": {k: v for k, v in v1["devices"][0].items() if k != "name"},
    }
    assert desired == before  # the spec shares the desired slice's parts, and changes none
    empty = slice_spec(DesiredSlice(), api_version="v1", **common)  # type: ignore[arg-type]
    assert "devices" not in empty and "sharedCounters" not in empty
    with pytest.raises(ValueError, match="unsupported api version"):
        slice_spec(desired, api_version="v2", **common)  # type: ignore[arg-type]


def test_slice_manifest_is_owned_by_the_node() -> None:
    spec = {"driver": DRIVER}
    manifest = slice_manifest(
        spec, api_version="v1beta2", name="n-gpu", owner_node_name="n", owner_node_uid="uid-1"
    )
    assert manifest == {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "ResourceSlice",
        "metadata": {
            "name": "n-gpu",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "uid-1", "controller": True}
            ],
        },
        "spec": spec,
    }
    assert manifest["spec"] is not spec
    unowned = slice_manifest(spec, api_version="v1", name="x", owner_node_name="n", owner_node_uid=None)
    assert "ownerReferences" not in unowned["metadata"]


def test_render_names_and_counts() -> None:
    documents = list(
        yaml.safe_load_all(render_slices(EXAMPLES_DIR / "mixed-mig.yaml", "node-7", "v1", (1, 35)))
    )
    assert [d["metadata"]["name"] for d in documents] == [f"node-7-gpu.nvidia.com-{i}" for i in range(4)]
    assert {d["spec"]["pool"]["resourceSliceCount"] for d in documents} == {4}
    with pytest.raises(ValueError, match="unsupported api version"):
        render_slices(None, "n", "v2", (1, 34))


# ---- values ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (81559 * 2**20, "81559Mi"),
        (81920 * 2**20, "80Gi"),
        (9728 * 2**20, "9728Mi"),
        (132, "132"),
        (0, "0"),
        (1, "1"),
        (1000, "1k"),
        (1024, "1Ki"),
        (1536, "1536"),
        (2000, "2k"),
        (1500000, "1500k"),
    ],
)
def test_canonical_quantity(value: int, text: str) -> None:
    assert canonical_quantity(value) == text


@pytest.mark.parametrize(
    ("raw", "version"),
    [("580.95.05", "580.95.5"), ("13.0", "13.0.0"), ("9.0", "9.0.0"), ("570.148.08", "570.148.8")],
)
def test_semver(raw: str, version: str) -> None:
    assert semver(raw) == version


# ---- DeviceClasses ----------------------------------------------------------------------------


GPU_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"


def test_default_device_classes() -> None:
    gpu, mig = device_classes(DRIVER, "v1", (1, 34))
    assert gpu == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": GPU_CEL}}], "extendedResourceName": "nvidia.com/gpu"},
    }
    assert mig["metadata"]["name"] == "mig.nvidia.com"
    assert mig["spec"] == {"selectors": [{"cel": {"expression": MIG_CEL}}]}


@pytest.mark.parametrize(("api", "server"), [("v1", (1, 33)), ("v1beta2", (1, 35)), ("v1beta1", (1, 34))])
def test_extended_resource_name_only_for_v1_on_1_34_and_later(api: str, server: tuple[int, int]) -> None:
    gpu, _ = device_classes(DRIVER, api, server)  # type: ignore[arg-type]
    assert "extendedResourceName" not in gpu["spec"] and gpu["apiVersion"] == f"resource.k8s.io/{api}"


def test_device_classes_follow_a_custom_driver_name() -> None:
    gpu, mig = device_classes("gpu.fake.example.com", "v1", (1, 35))
    assert (gpu["metadata"]["name"], mig["metadata"]["name"]) == (
        "gpu.fake.example.com",
        "mig.fake.example.com",
    )
    assert gpu["spec"]["extendedResourceName"] == "fake.example.com/gpu"
    expression = mig["spec"]["selectors"][0]["cel"]["expression"]
    assert expression == MIG_CEL.replace("gpu.nvidia.com", "gpu.fake.example.com")
