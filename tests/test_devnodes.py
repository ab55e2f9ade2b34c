"""NVIDIA's device nodes in GPU claim specs, and the host checks that keep them from reaching a
real device (dra_fake.gpu.devnodes; docs/reference/nvidia-gpu-driver.md#53-device-nodes-without-hardware)."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import pytest

from dra_fake.core import cdi
from dra_fake.core.chardev import char_majors
from dra_fake.core.nvidiahost import nvidia_pci_functions
from dra_fake.gpu import edits
from dra_fake.gpu.devnodes import DeviceNodePolicy, DeviceNodes, decide
from tests.cdibed import DRIVER, GPU, MIG, UID_LETTER, spec_device

# A host without NVIDIA's driver (trimmed /proc/devices of a Debian VM).
PLAIN_HOST = """Character devices:
  1 mem
  4 /dev/vc/0
  5 /dev/tty
 10 misc
 13 input
 89 i2c
120 some-local-driver
128 ptm
136 pts
226 drm
238 hidraw
510 bsg

Block devices:
195 not-a-char-driver
259 blkext
"""
# What the NVIDIA driver adds (the uvm major is dynamic).
NVIDIA_HOST = PLAIN_HOST.replace(" 89 i2c\n", " 89 i2c\n195 nvidia-frontend\n").replace(
    "510 bsg\n", "510 nvidia-uvm\n511 bsg\n"
)


def char_majors_of(text: str) -> dict[int, str]:
    """char_majors of a /proc/devices with this text."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "devices"
        path.write_text(text)
        return char_majors(path)


def test_char_majors_reads_only_the_character_section(tmp_path: Path) -> None:
    path = tmp_path / "devices"
    path.write_text(PLAIN_HOST)
    majors = char_majors(path)
    assert majors[1] == "mem" and majors[510] == "bsg" and 195 not in majors and 259 not in majors
    assert char_majors(tmp_path / "absent") == {}


def test_the_nodes_are_nvidias() -> None:
    """Paths, majors and minors as NVIDIA's claim spec of v0.4.1 has them (captured); the uvm major
    is a free local-use one instead of the dynamic one a real host has."""
    nodes = DeviceNodes(121)
    assert nodes.gpu(3) == {
        "path": "/dev/nvidia3",
        "type": "c",
        "major": 195,
        "minor": 3,
        "fileMode": 0o666,
        "permissions": "rwm",
    }
    assert [(n["path"], n["major"], n["minor"]) for n in nodes.common()] == [
        ("/dev/nvidia-uvm", 121, 0),
        ("/dev/nvidia-uvm-tools", 121, 1),
        ("/dev/nvidiactl", 195, 255),
    ]


def test_on_a_plain_host_the_uvm_nodes_take_the_first_free_local_use_major() -> None:
    decision = decide("auto", char_majors_of(PLAIN_HOST), [])
    assert decision.nodes == DeviceNodes(121)  # 120 is taken


@pytest.mark.parametrize(
    ("mode", "proc", "pci", "why"),
    [
        ("never", PLAIN_HOST, [], "--device-nodes=never"),
        (
            "auto",
            NVIDIA_HOST,
            [],
            "NVIDIA character drivers are registered (195 nvidia-frontend, 510 nvidia-uvm)",
        ),
        ("auto", PLAIN_HOST, ["0000:3b:00.0"], "NVIDIA PCI functions on this host (0000:3b:00.0)"),
        ("auto", PLAIN_HOST, None, "cannot rule out real NVIDIA GPUs"),
        ("auto", "", [], "cannot tell which majors are free"),
        (
            "auto",
            "Character devices:\n" + "".join(f"{m} x\n" for m in (*range(120, 128), *range(60, 64))),
            [],
            "none is free for nvidia-uvm",
        ),
    ],
)
def test_no_nodes_where_a_real_device_could_answer(
    mode: str, proc: str, pci: list[str] | None, why: str
) -> None:
    decision = decide(mode, char_majors_of(proc), pci)  # type: ignore[arg-type]
    assert decision.nodes is None
    assert why in decision.reason


def test_nvidia_pci_functions_by_vendor(tmp_path: Path) -> None:
    for address, vendor in (
        ("0000:00:01.0", "0x8086"),
        ("0000:3b:00.0", "0x10de"),
        ("0000:5e:00.0", "0x15b3"),
    ):
        (tmp_path / address).mkdir()
        (tmp_path / address / "vendor").write_text(vendor + "\n")
    assert nvidia_pci_functions(tmp_path) == ["0000:3b:00.0"]
    assert nvidia_pci_functions(tmp_path / "no-pci-bus") is None  # unknown: fails closed


def test_the_policy_decides_again_for_each_claim_and_logs_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A driver loaded after the plugin started turns the nodes off for the next claim."""
    proc = tmp_path / "devices"
    proc.write_text(PLAIN_HOST)
    (tmp_path / "pci").mkdir()  # a PCI bus without NVIDIA functions
    policy = DeviceNodePolicy("auto", proc, tmp_path / "pci")
    with caplog.at_level(logging.INFO, logger="dra_fake.gpu.devnodes"):
        assert policy.current() == DeviceNodes(121)
        assert policy.current() == DeviceNodes(121)
        proc.write_text(NVIDIA_HOST)
        assert policy.current() is None
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "GPU device nodes injected",
        "GPU device nodes not injected",
    ]


def test_a_claim_spec_carries_each_gpus_node_and_the_common_ones() -> None:
    """A MIG device gets its parent GPU's node (NVIDIA adds nvidia-caps nodes too; we do not)."""
    spec = edits.build_claim_spec(
        DRIVER,
        UID_LETTER,
        [spec_device(UID_LETTER, GPU), spec_device(UID_LETTER, MIG)],
        device_nodes=DeviceNodes(121),
    )
    cdi.validate_spec(spec)
    assert [d["containerEdits"]["deviceNodes"][0]["path"] for d in spec["devices"]] == [
        "/dev/nvidia0",
        "/dev/nvidia1",
    ]
    assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidiactl",
    ]
    assert all("hostPath" not in n for n in spec["containerEdits"]["deviceNodes"])  # no host node
    without = edits.build_claim_spec(DRIVER, UID_LETTER, [spec_device(UID_LETTER, GPU)])
    assert "deviceNodes" not in without["containerEdits"]


def test_the_pci_bus_is_scanned_once_at_start_not_at_each_claim(tmp_path: Path) -> None:
    """Off the prepare path: real GPUs are there at boot; a driver loaded later shows in /proc/devices."""
    proc = tmp_path / "devices"
    proc.write_text(PLAIN_HOST)
    gpu = tmp_path / "pci" / "0000:3b:00.0"
    gpu.mkdir(parents=True)
    (gpu / "vendor").write_text("0x10de\n")
    policy = DeviceNodePolicy("auto", proc, tmp_path / "pci")
    assert policy.current() is None
    (gpu / "vendor").write_text("0x8086\n")  # not read again
    assert policy.current() is None
