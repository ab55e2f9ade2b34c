"""Lay out what a pod with one simulated H200 sees (hack/device/h200-capture.sh runs our nvidia-smi
and NVML probes against it on the real-GPU machine, beside NVIDIA's): the device file and live file
the plugin writes, the library and nvidia-smi, under OUT/{root,lib,bin}.

    python hack/device/fake-root.py OUT        (after make native)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from dra_fake.gpu.inventory import load_inventory
from dra_fake.gpu.monitor import GpuMonitor
from dra_fake.gpu.nvidia_smi import CONTAINER_DEVICES_DIR, CONTAINER_LIVE_DIR, NvidiaSmi

INVENTORY = "gpus:\n- profile: h200-sxm-141gb\n"


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "inventory.yaml"
        config.write_text(INVENTORY)
        inventory = load_inventory(config, "node-a")
        smi = NvidiaSmi.from_inventory(Path(tmp) / "plugin", inventory)
        smi.ensure_tools()
        devices = out / "root" / CONTAINER_DEVICES_DIR.lstrip("/")
        devices.mkdir(parents=True, exist_ok=True)
        for device in inventory.devices.values():
            assert device.uuid is not None
            mount = smi.device_mount(device, device.uuid)
            (out / "root" / mount["containerPath"].lstrip("/")).write_text(smi.info_text(device, device.uuid))
        GpuMonitor(inventory, list, smi, "node-a", "gpu.nvidia.com").sample()  # an idle GPU's live file
        live = out / "root" / CONTAINER_LIVE_DIR.lstrip("/")
        shutil.copytree(smi.live_dir, live, dirs_exist_ok=True)  # live/<uuid>/state
        (out / "lib").mkdir(exist_ok=True)
        (out / "bin").mkdir(exist_ok=True)
        for mount in smi.spec_mounts():
            name = Path(mount["containerPath"]).name
            target = out / ("bin" if name == "nvidia-smi" else "lib") / name
            shutil.copy2(mount["hostPath"], target)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
