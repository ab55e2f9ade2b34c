"""`nvidia-smi` and NVML inside pods (docs/nvml.md): dra-fake's NVML library and its nvidia-smi
(native/, built by `make native` into this package's `native/` directory), plus one device file
per allocated device.

Host side (the plugin's data dir, `<kubelet plugins dir>/<driver>/nvidia-smi/`):

- `nvidia-smi` (a static C program) and `libnvidia-ml.so.1` (the NVML library), mode 0755;
- `devices/<device>_<uuid>`: one device file per device and UUID (a dynamic MIG device has a new
  UUID per claim): the static keys of docs/nvml.md (dra_fake.gpu.devicefile), which the library
  reads; a share of a shared device has its own, `devices/<device>_<uuid>_<shareID>[_<MiB>]`,
  with the share keys (its ID and, when its view is its own memory, that many MiB);
- `live/<GPU or MIG UUID>/state`: the device's readings now (the live keys of docs/nvml.md:
  dra_fake.gpu.monitor.live_state, the numbers the metrics endpoint serves) and what active
  GpuFaults change (lost, ECC counters, Xid; docs/faults.md), rewritten while the containers run;
  `live/share-<shareID>/state`: a share's own usage (docs/nvml.md#shares). One directory per
  device, so a container mounts its own devices' readings and no other's (docs/security.md).

Container side (CDI mounts of the claim's spec, read-only bind mounts):

- `/usr/bin/nvidia-smi` and the library as `/usr/lib/<arch>-linux-gnu/libnvidia-ml.so.1`,
  `.../libnvidia-ml.so.<driver version>` and the same two in `/usr/lib64` (spec-level edits: any
  device of the claim brings them; <arch> is this machine's: x86_64, aarch64);
- `/var/run/dra-fake/nvidia-smi/devices/<bus id>_<gpu|mig-<GI id>>` per device (device edit), so a
  container lists exactly the devices it was given; names sort in nvidia-smi's order;
- `/var/run/dra-fake/nvidia-smi/live/<name>` per device (device edit): the device's live
  directory, and for a MIG device its parent GPU's (faults and the GPU's readings), for a share
  also the share's own; directory mounts, so files replaced on the host show in running
  containers (a file mount would keep the old inode). The directories are made at prepare,
  before any container mounts them, and live until their device's last claim goes.

The file names of the info files carry their own identity (device name and UUID), so any spec can
be made whole again from its mounts alone (`ensure_files`), e.g. after a restart.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import re
import shlex
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from dra_fake.core.atomic import TEMP_SUFFIX, atomic_write, file_identity, remove_durably
from dra_fake.gpu import devicefile
from dra_fake.gpu.devicefile import gi_instance_id, nvidia_bus_id
from dra_fake.gpu.devices import AllocatableDevice
from dra_fake.gpu.inventory import Inventory, PhysicalGpu

_log = logging.getLogger(__name__)

CONTAINER_BINARY = "/usr/bin/nvidia-smi"
LIBRARY = "libnvidia-ml.so.1"
CONTAINER_DEVICES_DIR = "/var/run/dra-fake/nvidia-smi/devices"
CONTAINER_LIVE_DIR = "/var/run/dra-fake/nvidia-smi/live"
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]  # NVIDIA's, for its nvidia-smi mount
_INFO_NAME = re.compile(
    r"^(?P<device>[a-z0-9-]+)_(?P<uuid>(GPU|MIG)-[0-9a-f-]+)(?:_(?P<share>[A-Za-z0-9-]+)(?:_(?P<mib>[0-9]+))?)?$"
)
SHARE_LIVE_PREFIX = "share-"
LIVE_FILE = "state"  # live/<name>/state: the file inside each device's live directory


class NativeArtifactsMissing(RuntimeError):
    """The package has no built nvidia-smi or NVML library."""


@functools.cache
def native_bytes(name: str) -> bytes:
    """A built native artifact of this package (`nvidia-smi` or `libnvidia-ml.so.1`)."""
    path = resources.files("dra_fake.gpu.nvidia_smi").joinpath("native", name)
    try:
        return path.read_bytes()
    except OSError as e:
        raise NativeArtifactsMissing(
            f"dra-fake's native nvidia-smi and NVML library are not built ({name} missing in "
            "dra_fake/gpu/nvidia_smi/native): run `make native`"
        ) from e


def binary_bytes() -> bytes:
    return native_bytes("nvidia-smi")


def library_bytes() -> bytes:
    return native_bytes(LIBRARY)


def library_dirs(machine: str | None = None) -> list[str]:
    """Where images look for libnvidia-ml: the Debian multiarch directory and /usr/lib64."""
    machine = machine or platform.machine()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return [f"/usr/lib/{arch}-linux-gnu", "/usr/lib64"]


class NvidiaSmi:
    """The host files behind the in-container nvidia-smi of one driver on one node."""

    def __init__(
        self,
        plugin_data_dir: Path,
        devices: Mapping[str, AllocatableDevice],
        gpus: Iterable[PhysicalGpu],
    ) -> None:
        binary_bytes(), library_bytes()  # a plugin without them stops at start-up, saying why
        self.dir = Path(plugin_data_dir) / "nvidia-smi"
        self.binary_path = self.dir / "nvidia-smi"
        self.library_path = self.dir / LIBRARY
        self._binary_name, self._library_name = str(self.binary_path), str(self.library_path)
        self.live_dir = self.dir / "live"
        self._info_prefix = f"{self.dir / 'devices'}/"  # of a spec's info file mounts
        self._live_prefix = f"{self.live_dir}/"  # of a spec's live directory mounts
        self.devices = dict(devices)
        self.gpus = {gpu.minor: gpu for gpu in gpus}
        versions = sorted({gpu.profile.driver_version for gpu in self.gpus.values()})
        self.driver_version = versions[0] if versions else None  # one driver per node
        self._gpu_text: dict[int, str] = {}  # minor -> its GPU's lines of every device file
        # path -> (inode, size, mtime) and the bytes that file held when this process last wrote or
        # read it: a prepare checks its spec's files with one stat instead of reading each.
        # Keyed by the path as a string: a prepare looks its spec's mounts up as they are written.
        self._verified: dict[str, tuple[tuple[int, int, int], bytes]] = {}

    @classmethod
    def from_inventory(cls, plugin_data_dir: Path, inventory: Inventory) -> NvidiaSmi:
        return cls(plugin_data_dir, inventory.devices, inventory.gpus)

    def info_path(self, device: str, uuid: str) -> Path:
        return Path(self._info_name(device, uuid))

    def _info_name(
        self, device: str, uuid: str, share_id: str | None = None, share_mib: int | None = None
    ) -> str:
        """`<device>_<uuid>`, a share's `<device>_<uuid>_<shareID>[_<MiB of its view>]`: the name
        says everything the file holds (ensure_files writes it back from the name alone)."""
        name = f"{self._info_prefix}{device}_{uuid}"
        if share_id is None:
            return name
        return f"{name}_{share_id}" if share_mib is None else f"{name}_{share_id}_{share_mib}"

    # --- CDI edits ---------------------------------------------------------------------------

    def spec_mounts(self) -> list[dict[str, Any]]:
        """What any device of a spec brings: nvidia-smi, the NVML library under the names and in
        the directories programs load it from, and the live directory."""
        mounts = [_mount(self.binary_path, CONTAINER_BINARY)]
        names = [LIBRARY] + ([f"libnvidia-ml.so.{self.driver_version}"] if self.driver_version else [])
        mounts += [_mount(self.library_path, f"{d}/{n}") for d in library_dirs() for n in names]
        return mounts

    def live_path(self, name: str) -> Path:
        """The live file of a device (its UUID) or share (`share-<shareID>`)."""
        return self.live_dir / name / LIVE_FILE

    def live_mounts(self, device: AllocatableDevice, uuid: str) -> list[dict[str, Any]]:
        """The live directories a device's container reads: its own, and a MIG device's parent
        GPU's (the library reads a GPU's faults and readings for its MIG devices)."""
        names = [uuid] if device.gpu_uuid == uuid else [uuid, device.gpu_uuid]
        return [self.live_mount(name) for name in names]

    def live_mount(self, name: str) -> dict[str, Any]:
        return _mount(self.live_dir / name, f"{CONTAINER_LIVE_DIR}/{name}")

    def share_live_mount(self, share_id: str) -> dict[str, Any]:
        return self.live_mount(SHARE_LIVE_PREFIX + share_id)

    def device_mount(
        self, device: AllocatableDevice, uuid: str, share_id: str | None = None, share_mib: int | None = None
    ) -> dict[str, Any]:
        """The device file's mount; a share's is its own file at the same place in the container."""
        if device.kind == "mig" and device.mig is not None:
            suffix = f"mig-{gi_instance_id(device.mig.size, device.mig.start):02d}"
        else:
            suffix = "gpu"
        bus = nvidia_bus_id(device.pci_bus_id).replace(":", "-")
        return {
            "hostPath": self._info_name(device.name, uuid, share_id, share_mib),  # no Path per device
            "containerPath": f"{CONTAINER_DEVICES_DIR}/{bus}_{suffix}",
            "options": list(MOUNT_OPTIONS),
        }

    # --- files -------------------------------------------------------------------------------

    def info_text(
        self, device: AllocatableDevice, uuid: str, share_id: str | None = None, share_mib: int | None = None
    ) -> str:
        """The device file: the keys of docs/nvml.md (dra_fake.gpu.devicefile), a share's keys last."""
        gpu = self.gpus[device.minor]
        gpu_text = self._gpu_text.get(device.minor)
        if gpu_text is None:
            gpu_text = self._gpu_text[device.minor] = devicefile.lines(devicefile.gpu_keys(gpu))
        text = devicefile.device_text(gpu, device, uuid, gpu_text)
        if share_id is not None:
            text += devicefile.lines(devicefile.share_keys(share_id, share_mib))
        return text

    def write_info(self, device: AllocatableDevice, uuid: str) -> None:
        """Write the device's file and make its live directories (the device-plugin mode does so
        for every device at start)."""
        path = self.info_path(device.name, uuid)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write(path, self.info_text(device, uuid).encode(), 0o644)
        for mount in self.live_mounts(device, uuid):
            self._ensure_live_dir(Path(mount["hostPath"]))

    def ensure_tools(self) -> None:
        """nvidia-smi, the library and the (maybe empty) live directory every spec mounts."""
        for path, data in ((self.binary_path, binary_bytes()), (self.library_path, library_bytes())):
            if not self._holds(path, data):
                self.dir.mkdir(parents=True, exist_ok=True)
                self._write(path, data, 0o755)
        if not os.path.isdir(self.live_dir):
            self.live_dir.mkdir(mode=0o755, parents=True, exist_ok=True)

    def _ensure_live_dir(self, path: str | Path) -> None:
        """A device's live directory, before a container mounts it; a file there is a live file of
        the layout before per-device directories (one shared directory), replaced."""
        if os.path.isdir(path):
            return
        directory = Path(path)
        if directory.is_file():
            directory.unlink()
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)

    def write_live(self, states: Mapping[str, Mapping[str, int | float | str]]) -> None:
        """Device UUID or `share-<shareID>` -> its current values (the live keys of docs/nvml.md);
        the files of devices not named are removed, their directories kept (a running container
        may mount one: a new directory would not show in it). Only changed files are rewritten."""
        self.live_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        for name, state in states.items():
            text = devicefile.render(dict(sorted(state.items())), f"dra-fake live state: {name}").encode()
            path = self.live_path(name)
            if _read(path) != text:
                self._ensure_live_dir(path.parent)
                atomic_write(path, text, 0o644, durable=False)  # rewritten every few seconds
        for entry in self.live_dir.iterdir():
            if entry.name in states:
                continue
            if entry.is_dir():
                (entry / LIVE_FILE).unlink(missing_ok=True)
            elif entry.is_file():
                entry.unlink(missing_ok=True)

    def read_live(self, name: str) -> dict[str, str]:
        """What write_live wrote for the device (e.g. the counters an earlier process left)."""
        raw = _read(self.live_path(name))
        if raw is None:  # the layout before per-device directories: live/<name> a file
            raw = _read(self.live_dir / name) if (self.live_dir / name).is_file() else None
        text = (raw or b"").decode(errors="replace")
        out = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and not line.startswith("#"):
                out[key] = " ".join(shlex.split(value)) if value else ""
        return out

    def ensure_files(self, spec: Mapping[str, Any]) -> None:
        """Write the tools and every info file a CDI spec mounts (idempotent; only changes)."""
        self.ensure_tools()
        # the tools were just checked; the library is mounted under several names
        checked = {self._binary_name, self._library_name}
        for edits in _edits(spec):
            for mount in edits.get("mounts") or []:
                host_path = str(mount.get("hostPath", ""))
                if host_path in checked:
                    continue
                checked.add(host_path)
                if host_path.startswith(self._live_prefix):
                    self._ensure_live_dir(host_path)
                    continue
                if self._unchanged(host_path):  # a file this process wrote or read: its text follows
                    continue  # from its name (an info file) or is a tool
                name = host_path.removeprefix(self._info_prefix)
                if name == host_path or "/" in name:
                    continue  # not an info file
                match = _INFO_NAME.match(name)
                if match is None or match["device"] not in self.devices:
                    _log.warning("nvidia-smi info file of an unknown device skipped path=%s", host_path)
                    continue
                host = Path(host_path)
                mib = int(match["mib"]) if match["mib"] else None
                device = self.devices[match["device"]]
                text = self.info_text(device, match["uuid"], match["share"], mib).encode()
                if not self._holds(host, text):
                    host.parent.mkdir(parents=True, exist_ok=True)
                    # a share's file lives as long as its claim: a crash losing it is repaired
                    # at start-up (every prepared claim's files are ensured again)
                    self._write(host, text, 0o644, durable=not match["share"])

    def _unchanged(self, path: str) -> bool:
        """Whether the file is the one this process last wrote or read there (one stat)."""
        verified = self._verified.get(path)
        try:
            return verified is not None and verified[0] == file_identity(path)
        except OSError:
            return False

    def _holds(self, path: Path, text: bytes) -> bool:
        """Whether the file at `path` holds `text`: read only when it changed since this process
        last wrote or read it (someone replaced or deleted it), else one stat."""
        try:
            key = file_identity(path)
        except OSError:
            return False
        if self._verified.get(str(path)) == (key, text):
            return True
        if _read(path) != text:
            return False
        self._verified[str(path)] = (key, text)
        return True

    def _write(self, path: Path, text: bytes, mode: int, durable: bool = True) -> None:
        atomic_write(path, text, mode, durable=durable)
        self._verified[str(path)] = (file_identity(path), text)

    def remove_info(self, device: str, uuid: str) -> None:
        """A destroyed dynamic MIG device's file and live directory (its UUID is never used again)."""
        self.remove_file(self.info_path(device, uuid))
        self.remove_live_dir(uuid)

    def remove_live_dir(self, name: str) -> None:
        directory = self.live_dir / name
        if not directory.is_dir():
            return
        for path in directory.iterdir():
            path.unlink(missing_ok=True)
        directory.rmdir()

    def remove_file(self, path: Path, durable: bool = True) -> None:
        self._verified.pop(str(path), None)  # dynamic MIG UUIDs are new per claim: keep the map bounded
        if durable:
            remove_durably(path)
        else:
            path.unlink(missing_ok=True)

    def remove_share_files(self, spec: Mapping[str, Any]) -> None:
        """The device files of the shares a claim spec mounts: each share has its own, which goes
        with it (a device's plain file stays for the device's other claims). Idempotent; not
        durable: a file a crash brings back is swept at start-up."""
        for edits in _edits(spec):
            for mount in edits.get("mounts") or []:
                host_path = str(mount.get("hostPath", ""))
                name = host_path.removeprefix(self._info_prefix)
                match = _INFO_NAME.match(name) if name != host_path else None
                if match is not None and match["share"]:
                    self.remove_file(Path(host_path), durable=False)
                live = host_path.removeprefix(self._live_prefix)
                if live != host_path and live.startswith(SHARE_LIVE_PREFIX):
                    self.remove_live_dir(live)

    def remove_stale_live_files(self) -> int:
        """Temp files of live writes a killed process left (the live files are rewritten anyway)."""
        if not self.live_dir.is_dir():
            return 0
        return sum(
            remove_durably(p) for p in sorted(self.live_dir.glob("*/*")) if p.name.endswith(TEMP_SUFFIX)
        )

    def sweep(self, specs: Iterable[Mapping[str, Any]]) -> int:
        """Remove the info files and the live directories of dynamic MIG devices and shares that
        none of `specs` mounts (they outlive their device when the plugin dies between destroying
        it and dropping the claim), and the temp files of interrupted live writes. A GPU's or
        static MIG device's live directory stays: its name never changes, and the monitor writes it."""
        removed = self.remove_stale_live_files()
        keep = {
            Path(str(mount.get("hostPath", "")))
            for spec in specs
            for edits in _edits(spec)
            for mount in edits.get("mounts") or []
        }
        if self.live_dir.is_dir():
            stable = {d.uuid for d in self.devices.values()}
            for directory in sorted(self.live_dir.iterdir()):
                if directory.is_dir() and directory not in keep and directory.name not in stable:
                    self.remove_live_dir(directory.name)
                    removed += 1
        devices = self.dir / "devices"
        if not devices.is_dir():
            return removed
        for path in sorted(devices.iterdir()):
            if path not in keep and path.is_file():
                self._verified.pop(str(path), None)
                removed += remove_durably(path)
        return removed


def _mount(host: Path, container: str) -> dict[str, Any]:
    return {"hostPath": str(host), "containerPath": container, "options": list(MOUNT_OPTIONS)}


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _edits(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out = [spec.get("containerEdits") or {}]
    out += [d.get("containerEdits") or {} for d in spec.get("devices") or [] if isinstance(d, dict)]
    return [e for e in out if isinstance(e, dict)]
