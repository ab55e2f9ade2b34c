"""Shared fixtures for the prepare tests, and a subprocess entry point.

    python tests/crash_helper.py <root> prepare <claim.json>   # with DRA_FAKE_CRASH_AT=... to die
    python tests/crash_helper.py <root> unprepare <claim-uid>
    python tests/crash_helper.py <root> startup
    python tests/crash_helper.py <root> prepare-spot <claim.json>   # gpu-0 lendable as kept in <root>
    python tests/crash_helper.py <root> hold-lock              # prints "locked", waits for a stdin line

<root> holds `cdi/`, `plugin/` and a fake `boot_id` file.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dra_fake.core.locking import PrepareUnprepareLock
from dra_fake.gpu.configs import FeatureGates
from dra_fake.gpu.devices import AllocatableDevice, MigPlacement, gpu_uuid, mig_uuid
from dra_fake.gpu.lending import SPOT_SUFFIX, LendingSettings, not_lendable
from dra_fake.gpu.lendingfile import FILE_NAME, KeptLending
from dra_fake.gpu.shares import SharesMode
from dra_fake.gpu.state import DeviceState

DRIVER = "gpu.nvidia.com"
NODE = "node-a"
BOOT_ID = "11111111-2222-3333-4444-555555555555"
GIB = 1024**3
MEMORY_SHARES = SharesMode("memory")


def _gpu(index: int, shares: SharesMode | None = None) -> AllocatableDevice:
    return AllocatableDevice(
        name=f"gpu-{index}",
        kind="gpu",
        minor=index,
        index=index,
        gpu_uuid=gpu_uuid(NODE, index),
        uuid=gpu_uuid(NODE, index),
        pci_bus_id=f"0000:{index + 0x10:02x}:00.0",
        product_name="NVIDIA H100 80GB HBM3",
        profile_name="h100-sxm5-80gb",
        memory_bytes=80 * GIB,
        shares=shares,
    )


def _mig(
    index: int, placement: MigPlacement, dynamic: bool, shares: SharesMode | None = None
) -> AllocatableDevice:
    short = placement.profile.replace(".", "")
    return AllocatableDevice(
        name=f"gpu-{index}-mig-{short}-{placement.gi_profile_id}-{placement.start}",
        kind="mig",
        minor=index,
        index=index,
        gpu_uuid=gpu_uuid(NODE, index),
        uuid=None if dynamic else mig_uuid(NODE, index, placement),
        pci_bus_id=f"0000:{index + 0x10:02x}:00.0",
        product_name="NVIDIA H100 80GB HBM3",
        profile_name="h100-sxm5-80gb",
        memory_bytes=10 * GIB * placement.size,
        mig=placement,
        dynamic=dynamic,
        shares=shares,
    )


P1_0 = MigPlacement("1g.10gb", 19, 0, 1)
P1_1 = MigPlacement("1g.10gb", 19, 1, 1)
P2_0 = MigPlacement("2g.20gb", 14, 0, 2)


def make_devices() -> dict[str, AllocatableDevice]:
    """gpu-0, gpu-1: full GPUs; gpu-2: static MIG (1g at 0); gpu-3: full GPU + dynamic MIG;
    consumable shares (memory): gpu-4, a full GPU; gpu-5, dynamic MIG (1g at 0)."""
    devices = [
        _gpu(0),
        _gpu(1),
        _mig(2, P1_0, dynamic=False),
        _gpu(3),
        _mig(3, P1_0, dynamic=True),
        _mig(3, P1_1, dynamic=True),
        _mig(3, P2_0, dynamic=True),
        _gpu(4, MEMORY_SHARES),
        _mig(5, P1_0, dynamic=True, shares=MEMORY_SHARES),
    ]
    return {d.name: d for d in devices}


def result(request: str, device: str, **extra: Any) -> dict[str, Any]:
    return {"request": request, "driver": DRIVER, "pool": NODE, "device": device, **extra}


def opaque(
    params: dict[str, Any], requests: list[str] | None = None, source: str = "FromClaim"
) -> dict[str, Any]:
    entry: dict[str, Any] = {"source": source, "opaque": {"driver": DRIVER, "parameters": params}}
    if requests is not None:
        entry["requests"] = requests
    return entry


def make_claim(
    uid: str,
    results: list[dict[str, Any]],
    config: list[dict[str, Any]] | None = None,
    name: str = "claim",
    namespace: str = "default",
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"uid": uid, "name": name, "namespace": namespace},
        "status": {"allocation": {"devices": {"results": results, "config": config or []}}},
    }


def make_state(
    root: Path,
    gates: FeatureGates | None = None,
    devices: dict[str, AllocatableDevice] | None = None,
    **kwargs: Any,
) -> DeviceState:
    boot = root / "boot_id"
    if not boot.exists():
        root.mkdir(parents=True, exist_ok=True)
        boot.write_text(BOOT_ID + "\n")
    return DeviceState(
        driver_name=DRIVER,
        pool_name=NODE,
        devices=make_devices() if devices is None else devices,
        cdi_root=root / "cdi",
        plugin_data_dir=root / "plugin",
        feature_gates=gates or FeatureGates.of("TimeSlicingSettings", "MPSSupport"),
        node_name=NODE,
        boot_id_path=boot,
        **kwargs,
    )


def make_lending_state(root: Path) -> DeviceState:
    """make_state with gpu-0's lend view `gpu-0-spot`, whose claims are prepared as the plugin
    prepares them: while the lending state kept in <root>/plugin (lending.json) says gpu-0 is
    lendable, read once as a starting plugin reads it."""
    devices = make_devices()
    devices["gpu-0-spot"] = dataclasses.replace(devices["gpu-0"], name="gpu-0-spot", lends="gpu-0")
    kept = KeptLending(LendingSettings(), time.time(), root / "plugin" / FILE_NAME)

    def lend_state(view: str) -> str | None:
        return not_lendable(kept.state.taints([view.removesuffix(SPOT_SUFFIX)])[view])

    return make_state(root, devices=devices, lend_state=lend_state)


def main(argv: list[str]) -> int:
    root, op = Path(argv[0]), argv[1]
    if op == "hold-lock":
        with PrepareUnprepareLock(root / "plugin"):
            print("locked", flush=True)
            sys.stdin.readline()
        print("released", flush=True)
        return 0
    state = make_lending_state(root) if op == "prepare-spot" else make_state(root)
    if op in ("prepare", "prepare-spot"):
        claim = json.loads(Path(argv[2]).read_text())
        devices = state.prepare(claim)
        print(json.dumps([d.device_name for d in devices]))
    elif op == "unprepare":
        state.unprepare(argv[2])
    elif op == "startup":
        print(state.startup())
    else:
        raise SystemExit(f"unknown op {op}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
