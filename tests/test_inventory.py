"""Inventory config -> GPUs and devices: defaults, determinism, placement rules, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_fake.gpu.devices import MigPlacement, gpu_uuid, mig_uuid
from dra_fake.gpu.inventory import (
    Inventory,
    InventoryError,
    build_inventory,
    load_inventory,
    mig_device_name,
    parse_config,
)
from dra_fake.gpu.profiles import load_profiles

EXAMPLE = """\
gpus:
- profile: h100-sxm5-80gb
  count: 2
  mig: static
  migDevices:
  - {profile: 3g.40gb, start: 0}
  - {profile: 1g.10gb, start: 4}
- profile: h100-sxm5-80gb
  count: 1
  mig: dynamic
"""
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples" / "inventory"


def load(tmp_path: Path, config: str | dict[str, Any], node: str = "node-a") -> Inventory:
    path = tmp_path / "inv.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config), encoding="utf-8")
    return load_inventory(path, node)


def error_of(tmp_path: Path, config: dict[str, Any]) -> str:
    with pytest.raises(InventoryError) as error:
        load(tmp_path, config)
    return str(error.value)


def static(*devices: tuple[str, int], profile: str = "h100-sxm5-80gb") -> dict[str, Any]:
    mig = [{"profile": p, "start": s} for p, s in devices]
    return {"gpus": [{"profile": profile, "mig": "static", "migDevices": mig}]}


# ---- default and determinism --------------------------------------------------------------------


def test_no_config_is_eight_h100() -> None:
    inventory = load_inventory(None, "node-a")
    assert [g.profile.id for g in inventory.gpus] == ["h100-sxm5-80gb"] * 8
    assert [g.minor for g in inventory.gpus] == list(range(8))
    assert list(inventory.devices) == [f"gpu-{i}" for i in range(8)]
    assert len({g.pci_bus_id for g in inventory.gpus}) == 8
    assert inventory.gpus[0].pci_bus_id == "0000:18:00.0" and inventory.gpus[0].pcie_root == "pci0000:10"
    gpu0 = inventory.devices["gpu-0"]
    assert (gpu0.kind, gpu0.uuid, gpu0.memory_bytes) == ("gpu", gpu_uuid("node-a", 0), 81559 * 2**20)


def test_uuids_are_deterministic_per_node() -> None:
    first, again, other = (
        load_inventory(None, "node-a"),
        load_inventory(None, "node-a"),
        load_inventory(None, "node-b"),
    )
    assert [g.uuid for g in first.gpus] == [g.uuid for g in again.gpus]
    assert not {g.uuid for g in first.gpus} & {g.uuid for g in other.gpus}
    assert len({g.uuid for g in first.gpus}) == 8


def test_the_documented_example_parses(tmp_path: Path) -> None:
    inventory = load(tmp_path, EXAMPLE)
    assert [(g.minor, g.mig_mode) for g in inventory.gpus] == [(0, "static"), (1, "static"), (2, "dynamic")]
    names = list(inventory.devices)
    assert names[:4] == [
        "gpu-0-mig-3g40gb-9-0",
        "gpu-0-mig-1g10gb-19-4",
        "gpu-1-mig-3g40gb-9-0",
        "gpu-1-mig-1g10gb-19-4",
    ]
    assert "gpu-0" not in inventory.devices and "gpu-2" in inventory.devices  # static MIG hides the GPU
    assert len([n for n in names if n.startswith("gpu-2-mig-")]) == 25


def test_static_mig_uuids_have_no_nonce_and_dynamic_ones_none(tmp_path: Path) -> None:
    inventory = load(tmp_path, EXAMPLE)
    device = inventory.devices["gpu-1-mig-1g10gb-19-4"]
    placement = MigPlacement("1g.10gb", 19, 4, 1)
    assert (device.mig, device.dynamic) == (placement, False)
    assert device.uuid == mig_uuid("node-a", 1, placement)
    assert device.parent_uuid == gpu_uuid("node-a", 1) == inventory.gpus[1].uuid
    assert device.memory_bytes == 9984 * 2**20
    assert load(tmp_path, EXAMPLE).devices["gpu-1-mig-1g10gb-19-4"].uuid == device.uuid
    dynamic = inventory.devices["gpu-2-mig-7g80gb-0-0"]
    assert (dynamic.uuid, dynamic.dynamic, dynamic.mig) == (None, True, MigPlacement("7g.80gb", 0, 0, 8))


def test_ampere_dynamic_mig_offers_partitions_only(tmp_path: Path) -> None:
    inventory = load(tmp_path, {"gpus": [{"profile": "a100-sxm4-40gb", "mig": "dynamic"}]})
    assert "gpu-0" not in inventory.devices
    assert len(inventory.devices) == 25 and all(d.dynamic for d in inventory.devices.values())


def test_minors_and_pci_addresses_across_groups_and_beyond_the_topology(tmp_path: Path) -> None:
    config = {"gpus": [{"profile": "h100-sxm5-80gb", "count": 9}, {"profile": "t4", "count": 5}]}
    inventory = load(tmp_path, config)
    assert [g.minor for g in inventory.gpus] == list(range(14))
    assert (inventory.gpus[8].pci_bus_id, inventory.gpus[8].pcie_root) == ("0001:18:00.0", "pci0001:10")
    t4 = inventory.gpus[9:]
    assert [g.pci_bus_id for g in t4] == [
        "0000:00:1b.0",
        "0000:00:1c.0",
        "0000:00:1d.0",
        "0000:00:1e.0",
        "0001:00:1b.0",
    ]
    assert len({g.pci_bus_id for g in inventory.gpus}) == 14


def test_pci_clash_between_profiles_moves_to_the_next_domain(tmp_path: Path) -> None:
    inventory = load(tmp_path, {"gpus": [{"profile": "t4"}, {"profile": "l40s", "count": 2}]})
    assert [g.pci_bus_id for g in inventory.gpus] == ["0000:00:1b.0", "0001:00:1b.0", "0000:00:1c.0"]
    assert [g.pcie_root for g in inventory.gpus] == ["pci0000:00", "pci0001:00", "pci0000:00"]


@pytest.mark.parametrize(
    ("profile", "gi", "start", "minor", "expected"),
    [
        ("1g.5gb", 19, 0, 0, "gpu-0-mig-1g5gb-19-0"),
        ("1g.10gb+me", 20, 6, 3, "gpu-3-mig-1g10gb-me-20-6"),
        ("3g.40gb", 9, 4, 1, "gpu-1-mig-3g40gb-9-4"),
    ],
)
def test_mig_device_names_follow_nvidia(profile: str, gi: int, start: int, minor: int, expected: str) -> None:
    assert mig_device_name(minor, MigPlacement(profile, gi, start, 1)) == expected


def test_build_inventory_from_a_config_object() -> None:
    config = parse_config({"gpus": [{"profile": "l40s", "count": 2}], "driverVersion": "590.1.02"}, "x")
    inventory = build_inventory(config, "n", load_profiles())
    assert inventory.node_name == "n" and list(inventory.devices) == ["gpu-0", "gpu-1"]
    assert inventory.gpus[0].profile.driver_version == "590.1.02"


def test_examples_parse() -> None:
    examples = sorted(EXAMPLES_DIR.glob("*.yaml"))
    assert len(examples) >= 4
    for path in examples:
        assert load_inventory(path, "node-a").devices, path


# ---- static MIG placement rules ---------------------------------------------------------------


def test_overlapping_mig_devices(tmp_path: Path) -> None:
    message = error_of(tmp_path, static(("3g.40gb", 0), ("2g.20gb", 2)))
    assert message.endswith("gpus.0.migDevices.1: 2g.20gb at 2 overlaps 3g.40gb at 0 (memory slice 2)")


def test_invalid_start_lists_the_valid_ones(tmp_path: Path) -> None:
    message = error_of(tmp_path, static(("3g.40gb", 2)))
    assert message.endswith("gpus.0.migDevices.0.start: 3g.40gb cannot start at 2; valid starts: 0, 4")


def test_more_than_max_count(tmp_path: Path) -> None:
    message = error_of(tmp_path, static(("1g.10gb+me", 0), ("1g.10gb+me", 1)))
    assert message.endswith("gpus.0.migDevices.1: more than 1 1g.10gb+me instance(s) on one GPU")


def test_seven_1g_devices_fit(tmp_path: Path) -> None:
    inventory = load(tmp_path, static(*[("1g.10gb", i) for i in range(7)]))
    assert len(inventory.devices) == 7


def test_unknown_mig_profile(tmp_path: Path) -> None:
    message = error_of(tmp_path, static(("3g.20gb", 0)))
    assert (
        "gpus.0.migDevices.0.profile: '3g.20gb' is not a MIG profile of h100-sxm5-80gb; valid: 1g.10gb,"
        in message
    )


def test_static_mig_with_values_the_reference_lacks(tmp_path: Path) -> None:
    message = error_of(tmp_path, static(("3g.90gb", 0), profile="b200"))
    assert "gpus.0.migDevices.0.profile: 3g.90gb on b200 lacks memoryMiB, multiprocessors" in message
    assert load(tmp_path, static(("2g.45gb", 0), ("1g.23gb", 2), profile="b200")).devices


def test_dynamic_mig_needs_complete_tables(tmp_path: Path) -> None:
    message = error_of(tmp_path, {"gpus": [{"profile": "gb200", "mig": "dynamic"}]})
    assert (
        "gpus.0.mig: dynamic MIG needs every GI profile's values" in message
        and "7g.186gb: memoryMiB" in message
    )


def test_mig_on_a_gpu_without_mig(tmp_path: Path) -> None:
    message = error_of(tmp_path, {"gpus": [{"profile": "l40s", "mig": "static"}]})
    assert message.endswith("gpus.0.mig: profile 'l40s' is not MIG-capable; use mig: none")


def test_mig_devices_need_static_mode(tmp_path: Path) -> None:
    config = {"gpus": [{"profile": "h100-sxm5-80gb", "migDevices": [{"profile": "1g.10gb", "start": 0}]}]}
    assert error_of(tmp_path, config).endswith("gpus.0.migDevices: only allowed with mig: static")


# ---- config errors name file and field --------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"gpus": [{"profile": "t4", "cuont": 2}]}, "gpus.0.cuont: Extra inputs are not permitted"),
        ({"gpus": [{"profile": "t4", "count": "2"}]}, "gpus.0.count: Input should be a valid integer"),
        (
            {"gpus": [{"profile": "t4", "count": 0}]},
            "gpus.0.count: Input should be greater than or equal to 1",
        ),
        (
            {"gpus": [{"profile": "t4", "mig": "on"}]},
            "gpus.0.mig: Input should be 'none', 'static' or 'dynamic'",
        ),
        ({"gpus": [{"profile": "nope"}]}, "gpus.0.profile: unknown profile 'nope'; known: ["),
        ({"gpus": [], "imexCliqueID": "abc"}, "imexCliqueID: String should match pattern"),
        ({}, "gpus: Field required"),
        (
            {
                "gpus": [
                    {
                        "profile": "h100-sxm5-80gb",
                        "mig": "static",
                        "migDevices": [{"profile": "1g.10gb", "start": "0"}],
                    }
                ]
            },
            "gpus.0.migDevices.0.start: Input should be a valid integer",
        ),
        (
            {"gpus": [{"profile": "t4", "overrides": {"memoryMiB": "x"}}]},
            "gpus.0.overrides.memoryMiB: Input should",
        ),
        (
            {"gpus": [{"profile": "t4", "overrides": {"id": "x"}}]},
            "gpus.0.overrides.id: the profile id cannot",
        ),
        (
            {"gpus": [{"profile": "t4"}], "cudaDriverVersion": 13.0},
            "cudaDriverVersion: Input should be a valid string",
        ),
        ({"gpus": [{"profile": "t4"}], "driverVersion": "r580"}, "driverVersion: expected e.g. '580.105.08'"),
    ],
)
def test_config_errors_name_file_and_field(tmp_path: Path, config: dict[str, Any], expected: str) -> None:
    message = error_of(tmp_path, config)
    assert message.startswith(f"{tmp_path / 'inv.yaml'}: ")
    assert expected in message


def test_unreadable_config(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match=r"nope\.yaml"):
        load_inventory(tmp_path / "nope.yaml", "n")
    (tmp_path / "bad.yaml").write_text("gpus: [\n", encoding="utf-8")
    with pytest.raises(InventoryError, match=r"bad\.yaml"):
        load_inventory(tmp_path / "bad.yaml", "n")


# ---- overrides and extra fields -----------------------------------------------------------------


def test_overrides_apply_per_group_and_per_node(tmp_path: Path) -> None:
    config = {
        "driverVersion": "590.48.01",
        "cudaDriverVersion": "13.1",
        "imexCliqueID": "0b0f0c2d-6c67-4bba-9b6b-2a2f1e7ef7a1.32766",
        "gpus": [
            {
                "profile": "h100-sxm5-80gb",
                "overrides": {"productName": "NVIDIA H100 custom", "memoryMiB": 81920},
            },
            {"profile": "h100-sxm5-80gb"},
        ],
    }
    inventory = load(tmp_path, config)
    first, second = inventory.gpus
    assert (first.profile.product_name, first.profile.memory_mib) == ("NVIDIA H100 custom", 81920)
    assert inventory.devices["gpu-0"].memory_bytes == 80 * 2**30
    assert second.profile.product_name == "NVIDIA H100 80GB HBM3"
    assert {g.profile.driver_version for g in inventory.gpus} == {"590.48.01"}
    assert {g.profile.cuda_driver_version for g in inventory.gpus} == {"13.1"}
    assert inventory.imex_clique_id == "0b0f0c2d-6c67-4bba-9b6b-2a2f1e7ef7a1.32766"


def test_profile_dirs_reach_the_inventory(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "t4.yaml").write_text("id: t4\nproductName: NVIDIA T4 custom\n", encoding="utf-8")
    config = tmp_path / "inv.yaml"
    config.write_text("gpus: [{profile: t4}]\n", encoding="utf-8")
    assert load_inventory(config, "n", [profiles]).gpus[0].profile.product_name == "NVIDIA T4 custom"


def test_an_override_file_completes_b200_for_dynamic_mig(tmp_path: Path) -> None:
    # Values below are placeholders for the test, not hardware data (the reference lacks them).
    missing = {"memoryMiB": 1, "multiprocessors": 1, "decoders": 1, "jpegEngines": 1}
    rows = [dict(missing, name=name) for name in ("3g.90gb", "4g.90gb", "7g.180gb")]
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "b200.yaml").write_text(yaml.safe_dump({"id": "b200", "migProfiles": rows}), encoding="utf-8")
    config = tmp_path / "inv.yaml"
    config.write_text("gpus: [{profile: b200, mig: dynamic}]\n", encoding="utf-8")
    inventory = load_inventory(config, "n", [profiles])
    assert len(inventory.devices) == 26 and "gpu-0-mig-7g180gb-0-0" in inventory.devices
