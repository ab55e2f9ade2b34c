"""Whether this host may have a real NVIDIA GPU or driver: a fake GPU must never be offered beside,
or instead of, real ones (docs/security.md). Evidence, any of:

- an NVIDIA PCI function (vendor 0x10de under /sys/bus/pci/devices), driver loaded or not;
- the NVIDIA kernel module (/sys/module/nvidia) or its proc directory (/proc/driver/nvidia).

What cannot be read counts as evidence (fails closed): a host without a readable PCI bus or
module list cannot show it has no GPU. Paths are parameters for the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NVIDIA_PCI_VENDOR = "0x10de"
NVIDIA_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm")


@dataclass(frozen=True)
class HostPaths:
    pci_devices: Path = Path("/sys/bus/pci/devices")
    modules: Path = Path("/sys/module")
    proc_driver: Path = Path("/proc/driver/nvidia")


HOST = HostPaths()  # this host's (the tests put theirs here)


def nvidia_pci_functions(root: Path = HostPaths.pci_devices) -> list[str] | None:
    """Addresses of the host's NVIDIA PCI functions; None when they cannot be read (no PCI bus
    directory included: then nothing proves there is no GPU)."""
    try:
        functions = sorted(root.iterdir())
    except OSError:
        return None
    found = []
    for function in functions:
        try:
            vendor = (function / "vendor").read_text().strip().lower()
        except OSError:
            return None
        if vendor == NVIDIA_PCI_VENDOR:
            found.append(function.name)
    return found


def real_gpu_evidence(paths: HostPaths | None = None) -> str | None:
    """Why this host may have a real NVIDIA GPU or driver; None when it has neither."""
    paths = paths or HOST
    pci = nvidia_pci_functions(paths.pci_devices)
    if pci is None:
        return f"{paths.pci_devices} cannot be read: nothing rules out a real NVIDIA GPU"
    if pci:
        return f"NVIDIA PCI functions on this host ({', '.join(pci[:4])})"
    try:
        loaded = [m for m in NVIDIA_MODULES if (paths.modules / m).exists()]
        modules_readable = paths.modules.is_dir() and any(paths.modules.iterdir())
    except OSError:
        modules_readable, loaded = False, []
    if loaded:
        return f"the NVIDIA driver is loaded ({', '.join(loaded)} in {paths.modules})"
    if paths.proc_driver.exists():
        return f"the NVIDIA driver is loaded ({paths.proc_driver} exists)"
    if not modules_readable:
        return f"{paths.modules} cannot be read: nothing rules out a loaded NVIDIA driver"
    return None


def refusal(program: str, paths: HostPaths | None = None) -> str | None:
    """The start-up error of `program` on a host with real-GPU evidence; None where it may run."""
    evidence = real_gpu_evidence(paths)
    if evidence is None:
        return None
    return (
        f"{program} refuses to run on a node that may have real NVIDIA GPUs: {evidence}. Its fake GPUs "
        "would be offered beside the real ones, and a real container runtime would serve their device "
        "indexes. --allow-real-gpu-node=true (chart: allowRealGpuNodes) runs it anyway (docs/security.md)"
    )
