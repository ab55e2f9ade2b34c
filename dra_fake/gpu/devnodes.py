"""Device nodes of gpu.nvidia.com claims, as NVIDIA's claim specs have them: `/dev/nvidia<minor>` per
GPU (a MIG device gets its parent's), and `/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`
per spec (docs/reference/nvidia-gpu-driver.md#53-device-nodes-without-hardware).

A container must never reach a real device through them, so they are injected only where nothing
real can answer, and the decision is logged whenever it changes:
- no NVIDIA PCI function on the host (vendor 0x10de under /sys/bus/pci/devices): never on a node
  with real NVIDIA GPUs, even before their driver is loaded (scanned once, at start; a bus that
  cannot be read, or is missing, counts as one: dra_fake.core.nvidiahost);
- no character driver on major 195 (NVIDIA's, assigned by LANANA) or named `nvidia*` in
  /proc/devices, read again at every prepare: a driver loaded later turns them off for the next
  claim (one small read; the PCI scan stays off the prepare path);
- the uvm nodes take a major from LANANA's "local/experimental use" ranges that no driver holds;
  the kernel never hands those out dynamically (a real host's uvm major is a dynamic one).
Opening such a node in the container fails with ENXIO ("No such device or address").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dra_fake.core.chardev import parse_char_majors, read_proc_devices
from dra_fake.core.nvidiahost import nvidia_pci_functions

log = logging.getLogger(__name__)

NVIDIA_MAJOR = 195
CTL_MINOR = 255
UVM_TOOLS_MINOR = 1
# LANANA's local/experimental character majors outside the kernel's dynamic range (234-254, 384-511).
LOCAL_USE_MAJORS = (*range(120, 128), *range(60, 64))
FILE_MODE = 0o666  # a real host's /dev/nvidia* (the NVIDIA driver's default device file mode)
PERMISSIONS = "rwm"  # as NVIDIA's spec
PCI_DEVICES = Path("/sys/bus/pci/devices")

Mode = Literal["auto", "never"]
MODES: tuple[Mode, ...] = ("auto", "never")


def char_node(path: str, major: int, minor: int) -> dict[str, Any]:
    """Fully specified (type, major, minor), so the runtime needs no host node to stat."""
    return {
        "path": path,
        "type": "c",
        "major": major,
        "minor": minor,
        "fileMode": FILE_MODE,
        "permissions": PERMISSIONS,
    }


@dataclass(frozen=True)
class DeviceNodes:
    uvm_major: int

    def gpu(self, minor: int) -> dict[str, Any]:
        return char_node(f"/dev/nvidia{minor}", NVIDIA_MAJOR, minor)

    def common(self) -> list[dict[str, Any]]:
        """The spec-wide nodes, in NVIDIA's order."""
        return [
            char_node("/dev/nvidia-uvm", self.uvm_major, 0),
            char_node("/dev/nvidia-uvm-tools", self.uvm_major, UVM_TOOLS_MINOR),
            char_node("/dev/nvidiactl", NVIDIA_MAJOR, CTL_MINOR),
        ]


@dataclass(frozen=True)
class Decision:
    nodes: DeviceNodes | None
    reason: str


def decide(mode: Mode, majors: Mapping[int, str], nvidia_pci: Sequence[str] | None) -> Decision:
    """Whether claims get device nodes, from the host's registered character drivers and its
    NVIDIA PCI functions (None: could not be read)."""
    if mode == "never":
        return Decision(None, "device nodes are off (--device-nodes=never)")
    if nvidia_pci is None:
        return Decision(None, f"{PCI_DEVICES} is unreadable: cannot rule out real NVIDIA GPUs")
    if nvidia_pci:
        return Decision(None, f"NVIDIA PCI functions on this host ({', '.join(nvidia_pci[:4])}): a real GPU")
    nvidia = [f"{m} {n}" for m, n in sorted(majors.items()) if m == NVIDIA_MAJOR or n.startswith("nvidia")]
    if nvidia:
        return Decision(None, f"NVIDIA character drivers are registered ({', '.join(nvidia)})")
    if not majors:
        return Decision(None, "/proc/devices lists no character driver: cannot tell which majors are free")
    free = next((m for m in LOCAL_USE_MAJORS if m not in majors), None)
    if free is None:
        return Decision(None, "every local-use character major is registered: none is free for nvidia-uvm")
    return Decision(
        DeviceNodes(free),
        f"no NVIDIA device or driver on this host: {NVIDIA_MAJOR}:<minor> and the uvm nodes on "
        f"unused major {free} reach nothing",
    )


class DeviceNodePolicy:
    """The decision for the host this plugin runs on: its NVIDIA PCI functions from start-up, its
    character drivers as of each prepare (one read per group-commit batch)."""

    def __init__(self, mode: Mode, proc_devices: Path | None = None, pci_root: Path = PCI_DEVICES) -> None:
        self.mode = mode
        self.proc_devices = proc_devices
        self.nvidia_pci = nvidia_pci_functions(pci_root) if mode != "never" else []
        self._lock = threading.Lock()
        self._last: tuple[str, Decision] | None = None  # /proc/devices as last read, its decision

    def current(self) -> DeviceNodes | None:
        text = read_proc_devices(self.proc_devices)  # read at each prepare: a driver may load
        last = self._last
        if last is not None and last[0] == text:
            return last[1].nodes
        decision = decide(self.mode, parse_char_majors(text), self.nvidia_pci)
        with self._lock:
            previous, self._last = self._last, (text, decision)
        if previous is None or decision.reason != previous[1].reason:
            log.info(
                "GPU device nodes %s: %s",
                "injected" if decision.nodes else "not injected",
                decision.reason,
                extra={"deviceNodes": decision.nodes is not None},
            )
        return decision.nodes
