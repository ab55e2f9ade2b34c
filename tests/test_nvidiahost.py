"""A fake never lands on a real GPU node (issue 46, docs/security.md): the evidence of a real NVIDIA
GPU or driver (dra_fake.core.nvidiahost), unknown state failing closed, and both plugin modes
refusing to start unless allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_fake.cli import main
from dra_fake.core import nvidiahost
from dra_fake.core.nvidiahost import HostPaths, real_gpu_evidence


def host(
    tmp_path: Path, *, vendors: tuple[str, ...] = ("0x8086", "0x1af4"), modules: tuple[str, ...] = ("ext4",)
) -> HostPaths:
    pci, mods = tmp_path / "pci", tmp_path / "module"
    for i, vendor in enumerate(vendors):
        (pci / f"0000:00:0{i}.0").mkdir(parents=True)
        (pci / f"0000:00:0{i}.0" / "vendor").write_text(vendor + "\n")
    pci.mkdir(exist_ok=True)
    for m in modules:
        (mods / m).mkdir(parents=True)
    mods.mkdir(exist_ok=True)
    return HostPaths(pci, mods, tmp_path / "proc-driver-nvidia")


def test_a_host_without_nvidia_hardware_or_driver_passes(tmp_path: Path) -> None:
    assert real_gpu_evidence(host(tmp_path)) is None


def test_an_nvidia_pci_function_is_evidence_even_without_its_driver(tmp_path: Path) -> None:
    evidence = real_gpu_evidence(host(tmp_path, vendors=("0x8086", "0x10de")))
    assert evidence == "NVIDIA PCI functions on this host (0000:00:01.0)"


@pytest.mark.parametrize("module", ["nvidia", "nvidia_uvm"])
def test_a_loaded_nvidia_module_is_evidence(tmp_path: Path, module: str) -> None:
    evidence = real_gpu_evidence(host(tmp_path, modules=("ext4", module)))
    assert evidence is not None and f"the NVIDIA driver is loaded ({module} in" in evidence


def test_the_proc_driver_directory_is_evidence(tmp_path: Path) -> None:
    paths = host(tmp_path)
    paths.proc_driver.mkdir()
    assert real_gpu_evidence(paths) == f"the NVIDIA driver is loaded ({paths.proc_driver} exists)"


def test_unknown_state_fails_closed(tmp_path: Path) -> None:
    """Before: a missing /sys/bus/pci/devices counted as "no NVIDIA hardware"."""
    paths = host(tmp_path)
    gone = HostPaths(tmp_path / "no-pci", paths.modules, paths.proc_driver)
    assert "cannot be read: nothing rules out a real NVIDIA GPU" in str(real_gpu_evidence(gone))
    unreadable_vendor = host(tmp_path / "b")
    (unreadable_vendor.pci_devices / "0000:00:09.0").mkdir()  # no vendor file
    assert "cannot be read" in str(real_gpu_evidence(unreadable_vendor))
    no_modules = HostPaths(paths.pci_devices, tmp_path / "no-module", paths.proc_driver)
    assert "nothing rules out a loaded NVIDIA driver" in str(real_gpu_evidence(no_modules))


@pytest.mark.parametrize("program", ["gpu-kubelet-plugin", "device-plugin"])
def test_both_plugin_modes_refuse_a_real_gpu_node_unless_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], program: str
) -> None:
    monkeypatch.setattr(nvidiahost, "HOST", host(tmp_path, vendors=("0x10de",)))
    code = main([program, "--node-name=node-a", f"--kubeconfig={tmp_path / 'none'}"])
    err = capsys.readouterr().err
    assert code in (1, 2) and "refuses to run on a node that may have real NVIDIA GPUs" in err, err
    assert "--allow-real-gpu-node=true" in err
    # allowed: past the check (the next error is the missing kubeconfig, not the GPU)
    code = main(
        [program, "--node-name=node-a", f"--kubeconfig={tmp_path / 'none'}", "--allow-real-gpu-node=true"]
    )
    err = capsys.readouterr().err
    assert code != 0 and "real NVIDIA GPUs" not in err and "none" in err, err
