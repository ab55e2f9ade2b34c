"""Built-in GPU profiles hold the reference values; profile files are validated strictly."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from dra_fake.gpu.profiles import (
    BUILTIN_DIR,
    BUILTIN_PROFILE_IDS,
    GpuProfile,
    MigProfile,
    PcieLink,
    ProfileError,
    apply_overrides,
    load_profiles,
)
from dra_fake.gpu.profiles.models import Inforom, Telemetry
from dra_fake.gpu.render import profiles_table


@pytest.fixture(scope="module")
def profiles() -> dict[str, GpuProfile]:
    return load_profiles()


def write(directory: Path, name: str, data: dict[str, Any]) -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def builtin_raw(profile_id: str) -> dict[str, Any]:
    data = yaml.safe_load((BUILTIN_DIR / f"{profile_id}.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


# ---- built-in values (docs/reference/gpu-profiles.md#full-gpu-properties, #mig-profiles-per-model) ---------


def test_every_builtin_profile_loads_from_a_file_named_after_its_id(profiles: dict[str, GpuProfile]) -> None:
    assert sorted(profiles) == sorted(BUILTIN_PROFILE_IDS)
    assert sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml")) == sorted(BUILTIN_PROFILE_IDS)


# id, productName, architecture, CC, memory MiB, SMs, PCIe gen, PCI device id, addressing mode, driver
FULL_GPU = [
    (
        "a100-sxm4-40gb",
        "NVIDIA A100-SXM4-40GB",
        "Ampere",
        "8.0",
        40960,
        108,
        4,
        "0x20B010DE",
        "HMM",
        "570.148.08",
    ),
    (
        "a100-sxm4-80gb",
        "NVIDIA A100-SXM4-80GB",
        "Ampere",
        "8.0",
        81920,
        108,
        4,
        "0x20B210DE",
        "None",
        "555.42.02",
    ),
    (
        "h100-sxm5-80gb",
        "NVIDIA H100 80GB HBM3",
        "Hopper",
        "9.0",
        81559,
        132,
        5,
        "0x233010DE",
        "HMM",
        "580.105.08",
    ),
    ("h200-sxm-141gb", "NVIDIA H200", "Hopper", "9.0", 143771, 132, 5, "0x233510DE", "None", "580.159.04"),
    ("b200", "NVIDIA B200", "Blackwell", "10.0", 183359, 148, 5, "0x290110DE", "None", "580.105.08"),
    ("gb200", "NVIDIA GB200", "Blackwell", "10.0", 189471, 152, 5, "0x294110DE", "ATS", "580.173.02"),
    ("l40s", "NVIDIA L40S", "Ada Lovelace", "8.9", 46068, 142, 4, "0x26B910DE", "HMM", "595.91.07"),
    ("t4", "Tesla T4", "Turing", "7.5", 15360, 40, 3, "0x1EB810DE", "HMM", "595.91.07"),
]


@pytest.mark.parametrize(
    ("pid", "name", "arch", "cc", "mib", "sms", "gen", "pci", "mode", "driver"), FULL_GPU
)
def test_full_gpu_values_match_the_reference(
    profiles: dict[str, GpuProfile],
    pid: str,
    name: str,
    arch: str,
    cc: str,
    mib: int,
    sms: int,
    gen: int,
    pci: str,
    mode: str | None,
    driver: str,
) -> None:
    p = profiles[pid]
    assert (p.product_name, p.brand, p.architecture, p.cuda_compute_capability) == (name, "Nvidia", arch, cc)
    assert (p.memory_mib, p.multiprocessors, p.pcie.max_generation, p.pcie.max_width) == (mib, sms, gen, 16)
    assert (p.pci_device_id, p.addressing_mode, p.driver_version) == (pci, mode, driver)


def test_engine_counts_match_the_reference_or_are_unknown(profiles: dict[str, GpuProfile]) -> None:
    h100 = profiles["h100-sxm5-80gb"]
    assert (h100.copy_engines, h100.decoders, h100.encoders, h100.jpeg_engines, h100.ofa_engines) == (
        3,
        7,
        0,
        7,
        1,
    )
    l40s = profiles["l40s"]
    assert (l40s.copy_engines, l40s.decoders, l40s.encoders, l40s.jpeg_engines, l40s.ofa_engines) == (
        2,
        3,
        3,
        None,
        None,
    )
    assert profiles["b200"].copy_engines is None and profiles["gb200"].ofa_engines is None


def test_mig_capability(profiles: dict[str, GpuProfile]) -> None:
    for pid, p in profiles.items():
        assert p.mig_capable == (pid not in ("l40s", "t4"))
        if p.mig_capable:
            assert p.max_mig_instances == 7 and p.mig_memory_slices == 8 and len(p.mig_profiles) == 7
    assert profiles["a100-sxm4-40gb"].mig_toggle_needs_reset
    assert not profiles["h100-sxm5-80gb"].mig_toggle_needs_reset


# profile, GI name, id, MiB, SM, CE, DEC, ENC, JPG, OFA, max
# (docs/reference/gpu-profiles.md#mig-profiles-per-model)
MIG_ROWS = [
    ("a100-sxm4-40gb", "1g.5gb+me", 20, 4864, 14, 1, 1, 0, 1, 1, 1),
    ("a100-sxm4-40gb", "3g.20gb", 9, 19968, 42, 3, 2, 0, 0, 0, 2),
    ("a100-sxm4-80gb", "1g.10gb", 19, 9728, 14, 1, 0, 0, 0, 0, 7),
    ("a100-sxm4-80gb", "7g.80gb", 0, 80896, 98, 7, 5, 0, 1, 1, 1),
    ("h100-sxm5-80gb", "1g.10gb", 19, 9984, 16, 1, 1, 0, 1, 0, 7),
    ("h100-sxm5-80gb", "1g.20gb", 15, 20096, 26, 1, 1, 0, 1, 0, 4),
    ("h100-sxm5-80gb", "3g.40gb", 9, 40448, 60, 3, 3, 0, 3, 0, 2),
    ("h100-sxm5-80gb", "7g.80gb", 0, 81152, 132, 8, 7, 0, 7, 1, 1),
    ("h200-sxm-141gb", "2g.35gb", 14, 33280, 32, 2, 2, 0, 2, 0, 3),
    ("h200-sxm-141gb", "7g.141gb", 0, 143360, 132, 8, 7, 0, 7, 1, 1),
    ("b200", "2g.45gb", 14, 45312, 36, 4, 2, 0, 2, 0, 3),
    ("gb200", "1g.47gb", 15, 46592, 32, 2, 1, 0, 1, 0, 4),
]


@pytest.mark.parametrize("row", MIG_ROWS, ids=[f"{r[0]}-{r[1]}" for r in MIG_ROWS])
def test_mig_profile_values_match_the_reference(
    profiles: dict[str, GpuProfile], row: tuple[Any, ...]
) -> None:
    mig = profiles[row[0]].mig_profile(row[1])
    assert mig is not None
    assert (mig.gi_profile_id, mig.memory_mib, mig.multiprocessors, mig.copy_engines) == row[2:6]
    assert (mig.decoders, mig.encoders, mig.jpeg_engines, mig.ofa_engines, mig.max_count) == row[6:]


# GI profile id -> (placement starts, size), the same on every MIG GPU here
# (docs/reference/gpu-profiles.md#placements-and-gi-profile-ids)
PLACEMENTS = {19: ([0, 1, 2, 3, 4, 5, 6], 1), 20: ([0, 1, 2, 3, 4, 5, 6], 1), 15: ([0, 2, 4, 6], 2)}
PLACEMENTS |= {14: ([0, 2, 4], 2), 9: ([0, 4], 4), 5: ([0], 4), 0: ([0], 8)}


def test_placements_and_gi_ids_follow_the_shared_table(profiles: dict[str, GpuProfile]) -> None:
    for p in profiles.values():
        assert sorted(m.gi_profile_id for m in p.mig_profiles) == (
            sorted(PLACEMENTS) if p.mig_capable else []
        )
        for m in p.mig_profiles:
            starts, size = PLACEMENTS[m.gi_profile_id]
            assert [pl.start for pl in m.placements] == starts, (p.id, m.name)
            assert {pl.size for pl in m.placements} == {size}, (p.id, m.name)
            assert m.name.startswith(f"{ {0: 7, 5: 4, 9: 3, 14: 2}.get(m.gi_profile_id, 1) }g.")
            assert m.name.endswith("+me") == (m.gi_profile_id == 20)


def nvlib_profile_name(gi_slices: int, memory_mib: int, total_mib: int, suffix: str) -> str:
    """go-nvlib's name formula (docs/reference/gpu-profiles.md#mig-profile-names)."""
    total_bytes = total_mib * 2**20
    fraction = Decimal(math.ceil(memory_mib * 2**20 / total_bytes * 8)) / 8
    gb = (fraction * math.ceil(total_bytes / 2**30)).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return f"{gi_slices}g.{gb}gb{suffix}"


def test_stored_mig_names_match_the_nvlib_formula(profiles: dict[str, GpuProfile]) -> None:
    checked = 0
    for p in profiles.values():
        for m in p.mig_profiles:
            if m.memory_mib is None:
                continue
            gi_slices = int(m.name.split("g.")[0])
            suffix = "+me" if m.gi_profile_id == 20 else ""
            assert m.name == nvlib_profile_name(gi_slices, m.memory_mib, p.memory_mib, suffix), p.id
            checked += 1
    assert checked == 4 * 7 + 2 * 4


def test_values_the_reference_lacks_are_null_not_invented(profiles: dict[str, GpuProfile]) -> None:
    assert profiles["b200"].incomplete_mig_profiles() == {
        name: ["memoryMiB", "multiprocessors", "decoders", "jpegEngines"]
        for name in ("3g.90gb", "4g.90gb", "7g.180gb")
    }
    assert set(profiles["gb200"].incomplete_mig_profiles()) == {"3g.93gb", "4g.93gb", "7g.186gb"}
    for pid in ("a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb"):
        assert profiles[pid].incomplete_mig_profiles() == {}


def aliases(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


@pytest.mark.parametrize("profile_id", BUILTIN_PROFILE_IDS)
def test_builtin_files_state_every_field(profile_id: str) -> None:
    """Optional fields default to null; a built-in file still writes each one, with its source or
    the reason it is unknown in a comment (docs/reference/gpu-profiles.md)."""
    raw = builtin_raw(profile_id)
    optional_without_mig = {"migMemorySlices", "migProfiles"}
    assert aliases(GpuProfile) - raw.keys() <= (optional_without_mig if "migProfiles" not in raw else set())
    assert raw["telemetry"].keys() == aliases(Telemetry)
    assert raw["pcie"].keys() == aliases(PcieLink)
    assert raw["inforom"].keys() == aliases(Inforom)
    for row in raw.get("migProfiles", []):
        assert row.keys() == aliases(MigProfile), row["name"]


def test_limits_and_clocks_are_ordered(tmp_path: Path) -> None:
    data = builtin_raw("h100-sxm5-80gb") | {"id": "x"}
    data["telemetry"] = dict(data["telemetry"], powerMinLimitW=800)
    write(tmp_path, "x.yaml", data)
    with pytest.raises(ProfileError, match=r"x\.yaml: telemetry.powerMinLimitW: must not exceed powerLimitW"):
        load_profiles([tmp_path])


def test_pci_topology_bus_ids_are_unique(profiles: dict[str, GpuProfile]) -> None:
    for p in profiles.values():
        assert len({s.bus_id for s in p.pci_topology}) == len(p.pci_topology)


# ---- validation errors name file and field -----------------------------------------------------


def test_invalid_mig_memory_names_file_and_field(tmp_path: Path) -> None:
    data = builtin_raw("h100-sxm5-80gb") | {"id": "my-h100"}
    data["migProfiles"][0]["memoryMiB"] = "lots"
    write(tmp_path, "h100.yaml", data)
    with pytest.raises(ProfileError) as error:
        load_profiles([tmp_path])
    assert f"{tmp_path / 'h100.yaml'}: migProfiles.0.memoryMiB: Input should be a valid integer" in str(
        error.value
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"bogus": 1}, "bogus: Extra inputs are not permitted"),
        ({"memoryMiB": None}, "memoryMiB: Input should be a valid integer"),
        ({"cudaDriverVersion": 13.0}, "cudaDriverVersion: Input should be a valid string"),
        ({"cudaDriverVersion": "13"}, "cudaDriverVersion: expected '<major>.<minor>'"),
        ({"addressingMode": "hmm"}, "addressingMode: Input should be 'HMM', 'ATS' or 'None'"),
        ({"pciTopology": [{"busID": "0:18:0.0", "pcieRoot": "pci0000:00"}]}, "pciTopology.0.busID:"),
        ({"migMemorySlices": None}, "migMemorySlices: required when migProfiles is set"),
    ],
)
def test_profile_field_errors(tmp_path: Path, change: dict[str, Any], expected: str) -> None:
    write(tmp_path, "x.yaml", builtin_raw("h100-sxm5-80gb") | {"id": "x"} | change)
    with pytest.raises(ProfileError, match=r"x\.yaml: ") as error:
        load_profiles([tmp_path])
    assert expected in str(error.value)


def test_placement_beyond_the_memory_slices_is_rejected(tmp_path: Path) -> None:
    data = builtin_raw("h100-sxm5-80gb") | {"id": "x"}
    data["migProfiles"][3]["placements"].append({"start": 7, "size": 2})
    write(tmp_path, "x.yaml", data)
    with pytest.raises(ProfileError) as error:
        load_profiles([tmp_path])
    assert "x.yaml: migProfiles.3.placements.3: start 7 + size 2 exceeds migMemorySlices 8" in str(
        error.value
    )


def test_duplicate_mig_profile_name_is_rejected(tmp_path: Path) -> None:
    data = builtin_raw("h100-sxm5-80gb") | {"id": "x"}
    data["migProfiles"].append(dict(data["migProfiles"][0], giProfileID=99))
    write(tmp_path, "x.yaml", data)
    with pytest.raises(ProfileError, match=r"x.yaml: migProfiles: duplicate name '1g.10gb'"):
        load_profiles([tmp_path])


def test_file_without_id_or_mapping(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("- 1\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"a\.yaml: expected a mapping"):
        load_profiles([tmp_path])
    (tmp_path / "a.yaml").write_text("productName: x\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"a\.yaml: id: required"):
        load_profiles([tmp_path])


# ---- adding and overriding ----------------------------------------------------------------------


def test_file_with_an_existing_id_overrides_single_fields(tmp_path: Path) -> None:
    write(tmp_path, "h100.yaml", {"id": "h100-sxm5-80gb", "driverVersion": "590.10.01"})
    h100 = load_profiles([tmp_path])["h100-sxm5-80gb"]
    assert h100.driver_version == "590.10.01"
    assert h100.memory_mib == 81559 and len(h100.mig_profiles) == 7


def test_mig_profiles_merge_by_name(tmp_path: Path) -> None:
    write(tmp_path, "b200.yaml", {"id": "b200", "migProfiles": [{"name": "7g.180gb", "memoryMiB": 1000}]})
    b200 = load_profiles([tmp_path])["b200"]
    seven = b200.mig_profile("7g.180gb")
    assert seven is not None and seven.memory_mib == 1000 and seven.copy_engines == 16
    assert b200.mig_profiles[0].name == "1g.23gb" and len(b200.mig_profiles) == 7


def test_new_profile_extends_a_builtin(tmp_path: Path) -> None:
    write(
        tmp_path, "h100-nvl.yaml", {"id": "h100-custom", "extends": "h100-sxm5-80gb", "productName": "Custom"}
    )
    profiles = load_profiles([tmp_path])
    assert profiles["h100-custom"].product_name == "Custom"
    assert profiles["h100-custom"].multiprocessors == 132
    assert profiles["h100-sxm5-80gb"].product_name == "NVIDIA H100 80GB HBM3"


def test_extends_unknown_profile(tmp_path: Path) -> None:
    write(tmp_path, "n.yaml", {"id": "n", "extends": "nope"})
    with pytest.raises(ProfileError, match=r"n\.yaml: extends: unknown profile 'nope'"):
        load_profiles([tmp_path])


def test_incomplete_new_profile_names_missing_fields(tmp_path: Path) -> None:
    write(tmp_path, "n.yaml", {"id": "n", "productName": "N"})
    with pytest.raises(ProfileError, match=r"n\.yaml: memoryMiB: Field required"):
        load_profiles([tmp_path])


def test_apply_overrides_validates_with_a_prefix(profiles: dict[str, GpuProfile]) -> None:
    h100 = profiles["h100-sxm5-80gb"]
    assert apply_overrides(h100, {"memoryMiB": 1024}, "inv.yaml").memory_mib == 1024
    with pytest.raises(ProfileError, match=r"inv.yaml: gpus.0.overrides.memoryMiB: Input should be greater"):
        apply_overrides(h100, {"memoryMiB": -1}, "inv.yaml", prefix="gpus.0.overrides.")


def test_missing_profile_directory(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="profile directory not found"):
        load_profiles([tmp_path / "nope"])


def test_profiles_table(profiles: dict[str, GpuProfile]) -> None:
    lines = profiles_table(profiles).splitlines()
    assert lines[0].split() == ["ID", "PRODUCT", "NAME", "ARCHITECTURE", "MEMORY", "SMS", "MIG", "MAX", "MIG"]
    h100 = next(line for line in lines if line.startswith("h100-sxm5-80gb"))
    assert h100.split()[-6:] == ["Hopper", "81559", "MiB", "132", "yes", "7"]
    t4 = next(line for line in lines if line.startswith("t4 "))
    assert t4.split()[-4:] == ["MiB", "40", "no", "-"]
