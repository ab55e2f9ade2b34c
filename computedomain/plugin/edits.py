"""CDI specs of compute-domain.nvidia.com claims (docs/reference/nvidia-compute-domains.md#8-cdi): what the
channel and daemon get.

On hardware, IMEX channels are character devices `/dev/nvidia-caps-imex-channels/channel<N>` of the
`nvidia-caps-imex-channels` driver's dynamic major. A simulator has no safe major to give them: a
guessed one may be another driver's, and the real one (on a host with NVIDIA's driver) is a real
device. So the container always gets read-only placeholder files at the same paths:
`ls /dev/nvidia-caps-imex-channels` shows its channels, and nothing in it can reach a host device
(docs/computedomain.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from computedomain.api import ALLOCATION_ALL, IMEX_CHANNEL_COUNT
from dra_fake.core import cdi
from dra_fake.core.atomic import atomic_write
from dra_fake.core.chardev import char_majors

CHANNEL_DEVICE_DIR = "/dev/nvidia-caps-imex-channels"
CHANNEL_PROC_NAME = "nvidia-caps-imex-channels"
PLACEHOLDER_DIR = "imex-channels"  # in the plugin's data directory: single/channel0, all/channel*
IMEX_CONTAINER_DIR = "/imexd"
BASE_CLASS = "device"
BASE_DEVICE = "all"


def channel_major(proc_devices: Path | None = None) -> int | None:
    """The character major the kernel gave the IMEX channels driver (/proc/devices, or
    $ALT_PROC_DEVICES_PATH), or None. Only logged: channels are placeholder files either way."""
    return next((m for m, name in char_majors(proc_devices).items() if name == CHANNEL_PROC_NAME), None)


def placeholder_dir(data_dir: Path, allocation_mode: str) -> Path:
    return data_dir / PLACEHOLDER_DIR / ("all" if allocation_mode == ALLOCATION_ALL else "single")


def write_channel_placeholders(data_dir: Path) -> None:
    """Empty read-only files channel<N> for both allocation modes (idempotent)."""
    for mode in ("Single", ALLOCATION_ALL):
        directory = placeholder_dir(data_dir, mode)
        directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        for n in channel_ids(mode):
            path = directory / f"channel{n}"
            if not path.exists():
                path.touch(mode=0o444)


def channel_ids(allocation_mode: str) -> range:
    return range(IMEX_CHANNEL_COUNT) if allocation_mode == ALLOCATION_ALL else range(1)


def domain_env(uid: str, name: str, namespace: str) -> list[str]:
    return [
        f"COMPUTE_DOMAIN_UUID={uid}",
        f"COMPUTE_DOMAIN_NAME={name}",
        f"COMPUTE_DOMAIN_NAMESPACE={namespace}",
    ]


def channel_edits(
    uid: str,
    name: str,
    namespace: str,
    allocation_mode: str,
    clique_id: str,
    data_dir: Path,
) -> dict[str, Any]:
    """A channel claim: the channels as placeholder files (none when the node is not
    fabric-attached, as NVIDIA) and the COMPUTE_DOMAIN_* env."""
    ids = channel_ids(allocation_mode)
    env = [*domain_env(uid, name, namespace), f"DRA_FAKE_IMEX_CHANNELS={ids[0]}-{ids[-1]}"]
    edits: dict[str, Any] = {"env": env}
    if clique_id:
        edits["mounts"] = [
            {
                "hostPath": str(placeholder_dir(data_dir, allocation_mode)),
                "containerPath": CHANNEL_DEVICE_DIR,
                "options": ["ro", "nosuid", "nodev", "noexec", "bind"],
            }
        ]
    return edits


def daemon_edits(uid: str, name: str, namespace: str, clique_id: str, host_dir: Path) -> dict[str, Any]:
    """A daemon claim: its IMEX config directory mounted at /imexd, and the env it needs."""
    return {
        "env": [f"CLIQUE_ID={clique_id}", *domain_env(uid, name, namespace)],
        "mounts": [
            {
                "hostPath": str(host_dir),
                "containerPath": IMEX_CONTAINER_DIR,
                "options": ["rw", "nosuid", "nodev", "bind"],
            }
        ],
    }


def claim_spec(driver: str, devices: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The per-claim spec: devices `<claimUID>-channel-0` / `<claimUID>-daemon-0` with their edits."""
    spec: dict[str, Any] = {
        "cdiVersion": cdi.EARLIEST_VERSION,
        "kind": cdi.claim_kind(driver),
        "devices": [{"name": name, "containerEdits": dict(edits)} for name, edits in devices],
    }
    spec["cdiVersion"] = cdi.minimum_version(spec)
    cdi.checked(spec)
    return spec


def base_kind(driver: str) -> str:
    return f"{cdi.claim_vendor(driver)}/{BASE_CLASS}"


def base_device_id(driver: str) -> str:
    """`k8s.compute-domain.nvidia.com/device=all`, handed to the daemon with its claim device."""
    return f"{base_kind(driver)}={BASE_DEVICE}"


def write_base_spec(root: Path, driver: str) -> Path:
    """`k8s.compute-domain.nvidia.com-device_base.yaml`: device `all`, NVIDIA_VISIBLE_DEVICES=void."""
    spec: dict[str, Any] = {
        "cdiVersion": cdi.EARLIEST_VERSION,
        "kind": base_kind(driver),
        "devices": [{"name": BASE_DEVICE, "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}],
    }
    cdi.validate_spec(spec)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{cdi.claim_vendor(driver)}-{BASE_CLASS}_base.yaml"
    atomic_write(path, cdi.render_spec(spec), cdi.SPEC_FILE_MODE)
    return path
