"""ResourceSlice content checked against the reference of NVIDIA's driver: a full GPU's attributes and
capacity, static and dynamic MIG devices (H100, Ampere, by server version), splitting at 128
devices, PCI bus ID order, the shuffle seed, an empty node, driver names (tests/slicesbed.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_fake.core.slices import DesiredSlice
from dra_fake.gpu.slices import desired_slices, shuffled
from tests.slicesbed import DRIVER, inventory


# ---- content checked against the reference -----------------------------------------------------
def all_devices(slices: list[DesiredSlice]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices for d in s.devices}


def values(mapping: dict[str, dict[str, str]]) -> dict[str, str]:
    return {k: v["value"] for k, v in mapping.items()}


def test_full_gpu_attributes_and_capacity(tmp_path: Path) -> None:
    slices = desired_slices(inventory(tmp_path, {"gpus": [{"profile": "h100-sxm5-80gb"}]}), DRIVER, (1, 34))
    assert len(slices) == 1 and not slices[0].shared_counters
    (gpu,) = slices[0].devices
    inv = inventory(tmp_path, {"gpus": [{"profile": "h100-sxm5-80gb"}]})
    assert gpu == {
        "name": "gpu-0",
        "attributes": {
            "addressingMode": {"string": "HMM"},
            "architecture": {"string": "Hopper"},
            "brand": {"string": "Nvidia"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "cudaDriverVersion": {"version": "13.0.0"},
            "driverVersion": {"version": "580.105.8"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:10"},
            "type": {"string": "gpu"},
            "uuid": {"string": inv.gpus[0].uuid},
        },
        "capacity": {"memory": {"value": "81559Mi"}},
    }


def test_addressing_mode_is_omitted_when_unknown_and_published_as_none_string(tmp_path: Path) -> None:
    unknown = {"gpus": [{"profile": "h200-sxm-141gb", "overrides": {"addressingMode": None}}]}
    h200 = all_devices(desired_slices(inventory(tmp_path, unknown), DRIVER, (1, 34)))
    assert "addressingMode" not in h200["gpu-0"]["attributes"]
    a100 = all_devices(
        desired_slices(inventory(tmp_path, {"gpus": [{"profile": "a100-sxm4-80gb"}]}), DRIVER, (1, 34))
    )
    assert a100["gpu-0"]["attributes"]["addressingMode"] == {"string": "None"}
    assert a100["gpu-0"]["capacity"]["memory"] == {"value": "80Gi"}  # as the A100 80GB capture shows


def test_static_mig_device(tmp_path: Path) -> None:
    config = {
        "gpus": [
            {"profile": "a100-sxm4-80gb", "mig": "static", "migDevices": [{"profile": "1g.10gb", "start": 2}]}
        ]
    }
    inv = inventory(tmp_path, config)
    devices = all_devices(desired_slices(inv, DRIVER, (1, 34)))
    assert list(devices) == ["gpu-0-mig-1g10gb-19-2"]  # the full GPU is hidden
    device = devices["gpu-0-mig-1g10gb-19-2"]
    # The A100 80GB PCIe capture of issue #719 (same GI profile values).
    assert values(device["capacity"]) == {
        "copyEngines": "1",
        "decoders": "0",
        "encoders": "0",
        "jpegEngines": "0",
        "memory": "9728Mi",
        "memorySlice2": "1",
        "multiprocessors": "14",
        "ofaEngines": "0",
    }
    attributes = device["attributes"]
    assert attributes["type"] == {"string": "mig"} and attributes["profile"] == {"string": "1g.10gb"}
    assert attributes["uuid"] == {"string": inv.devices["gpu-0-mig-1g10gb-19-2"].uuid}
    assert attributes["parentUUID"] == {"string": inv.gpus[0].uuid}
    assert attributes["resource.kubernetes.io/pciBusID"] == {"string": inv.gpus[0].pci_bus_id}
    assert "consumesCounters" not in device


def test_h100_dynamic_mig(tmp_path: Path) -> None:
    slices = desired_slices(
        inventory(tmp_path, {"gpus": [{"profile": "h100-sxm5-80gb", "mig": "dynamic"}]}), DRIVER, (1, 34)
    )
    assert len(slices) == 1
    (counter_set,) = slices[0].shared_counters
    assert counter_set["name"] == "gpu-0-counter-set"
    counters = values(counter_set["counters"])
    assert counters == {
        "copy-engines": "8",
        "decoders": "7",
        "encoders": "0",
        "jpeg-engines": "7",
        "memory": "81152Mi",
        "multiprocessors": "132",
        "ofa-engines": "1",
    } | {f"memory-slice-{i}": "1" for i in range(8)}
    devices = all_devices(slices)
    assert len(devices) == 26
    assert [n for n in devices if "-1g10gb-19-" in n] == [f"gpu-0-mig-1g10gb-19-{i}" for i in range(7)]
    full = devices["gpu-0"]
    assert values(full["capacity"])["memory"] == "81152Mi"  # the 7g maximum, not 81559 MiB
    (consumed,) = full["consumesCounters"]
    assert consumed["counterSet"] == "gpu-0-counter-set" and values(consumed["counters"]) == counters
    one_g = devices["gpu-0-mig-1g10gb-19-3"]
    assert (
        "uuid" not in one_g["attributes"] and one_g["attributes"]["parentUUID"] == full["attributes"]["uuid"]
    )
    assert set(one_g["capacity"]) == {
        "multiprocessors",
        "copyEngines",
        "decoders",
        "encoders",
        "jpegEngines",
        "ofaEngines",
        "memory",
    }
    assert values(one_g["consumesCounters"][0]["counters"]) == {
        "copy-engines": "1",
        "decoders": "1",
        "encoders": "0",
        "jpeg-engines": "1",
        "memory": "9984Mi",
        "memory-slice-3": "1",
        "multiprocessors": "16",
        "ofa-engines": "0",
    }
    three_g = values(devices["gpu-0-mig-3g40gb-9-4"]["consumesCounters"][0]["counters"])
    assert sorted(k for k in three_g if k.startswith("memory-slice")) == [
        f"memory-slice-{i}" for i in range(4, 8)
    ]


def test_ampere_dynamic_mig_keeps_the_counter_set_without_the_full_gpu(tmp_path: Path) -> None:
    slices = desired_slices(
        inventory(tmp_path, {"gpus": [{"profile": "a100-sxm4-40gb", "mig": "dynamic"}]}), DRIVER, (1, 35)
    )
    assert [s.shared_counters[0]["name"] for s in slices if s.shared_counters] == ["gpu-0-counter-set"]
    devices = all_devices(slices)
    assert "gpu-0" not in devices and len(devices) == 25


def test_dynamic_layout_by_server_version(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"gpus": [{"profile": "h100-sxm5-80gb", "count": 9, "mig": "dynamic"}]})
    combined = desired_slices(inv, DRIVER, (1, 34))
    assert len(combined) == 9
    for i, item in enumerate(combined):
        assert [c["name"] for c in item.shared_counters] == [f"gpu-{i}-counter-set"]
        assert {d["name"].split("-mig")[0] for d in item.devices} == {f"gpu-{i}"}
    split = desired_slices(inv, DRIVER, (1, 35))
    assert [len(s.shared_counters) for s in split[:2]] == [8, 1]  # at most 8 counter sets per slice
    assert all(not s.devices for s in split[:2]) and all(not s.shared_counters for s in split[2:])
    assert [len(s.devices) for s in split[2:]] == [26] * 9
    with pytest.raises(ValueError, match="partitionable devices"):
        desired_slices(inv, DRIVER, (1, 32))


def test_many_devices_split_at_128(tmp_path: Path) -> None:
    layout = [{"profile": "1g.10gb", "start": i} for i in range(7)]
    inv = inventory(
        tmp_path,
        {"gpus": [{"profile": "h100-sxm5-80gb", "count": 20, "mig": "static", "migDevices": layout}]},
    )
    slices = desired_slices(inv, DRIVER, (1, 34))
    assert [len(s.devices) for s in slices] == [128, 12]


def test_gpus_are_ordered_by_pci_bus_id(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"gpus": [{"profile": "h100-sxm5-80gb", "count": 9}, {"profile": "t4"}]})
    names = [d["name"] for d in desired_slices(inv, DRIVER, (1, 34))[0].devices]
    # t4 0000:00:1b.0, then the H100s 0000:18:00.0 ... 0000:db:00.0, then the 9th H100 at 0001:18:00.0
    assert names == ["gpu-9", *[f"gpu-{i}" for i in range(9)]]


def test_shuffled_order_is_fixed_by_the_seed_and_keeps_every_slice_and_counter(tmp_path: Path) -> None:
    """--device-order=shuffled: NVIDIA's plugin lists devices in a new order on each start."""
    inv = inventory(tmp_path, {"gpus": [{"profile": "h100-sxm5-80gb", "count": 3, "mig": "dynamic"}]})
    wanted = desired_slices(inv, DRIVER, (1, 35))
    orders = {tuple(d["name"] for s in shuffled(wanted, seed) for d in s.devices) for seed in range(5)}
    assert len(orders) == 5  # five starts, five orders
    again = shuffled(wanted, 3)
    assert again == shuffled(wanted, 3)  # one start's syncs publish the same slices
    assert [s.shared_counters for s in again] == [s.shared_counters for s in wanted]
    assert [sorted(d["name"] for d in s.devices) for s in again] == [
        sorted(d["name"] for d in s.devices) for s in wanted
    ]


def test_empty_node_still_publishes_one_slice(tmp_path: Path) -> None:
    assert desired_slices(inventory(tmp_path, {"gpus": []}), DRIVER, (1, 34)) == [DesiredSlice()]


def test_invalid_driver_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid driver name"):
        desired_slices(inventory(tmp_path, {"gpus": []}), "GPU.example", (1, 34))
