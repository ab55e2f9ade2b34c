"""The device plugin's guard at every Allocate: an answer naming devices by index
(deviceIDStrategy: index) is refused while this host shows a real NVIDIA GPU or driver
(dra_fake.core.nvidiahost), since NVIDIA's container runtime there serves NVIDIA_VISIBLE_DEVICES=0,1
as the real GPUs 0 and 1. Checked at every Allocate, not once at start: a driver may load later,
and --allow-real-gpu-node lets the plugin start beside one. UUIDs are ours (no real GPU has them),
so a uuid answer is never a real GPU's."""

from __future__ import annotations

from dra_fake.core import nvidiahost
from dra_fake.deviceplugin.config import PluginConfig


def refusal(config: PluginConfig) -> str | None:
    """Why this Allocate must fail; None when its answer cannot name a real GPU."""
    if config.device_id_strategy != "index":
        return None
    evidence = nvidiahost.real_gpu_evidence()
    if evidence is None:
        return None
    return (
        f"deviceIDStrategy index refused: {evidence}; a real container runtime would serve these "
        "indexes as real GPUs (use deviceIDStrategy uuid)"
    )
