"""GPU Feature Discovery's node labels for a node's simulated GPUs. Pure.

Keys and value formats are GFD's (NVIDIA/k8s-device-plugin v0.20.0;
docs/reference/dcgm-exporter-and-gfd.md#b1-label-keys-and-values);
`nvidia.com/gpu.present` is the GPU Operator's label, which NVIDIA's charts select nodes by. The
plugin writes them on its own Node (dra_fake.gpu.nodelabels), fleet mode into its Nodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dra_fake.gpu.inventory import Inventory, PhysicalGpu
from dra_fake.gpu.profiles.models import GpuProfile, MigProfile

PREFIX = "nvidia.com/"
MIG_STRATEGIES = ("none", "single", "mixed")
# Keys GFD (and the operator's gpu.present) may write: what the plugin considers its own.
_OWN_KEY = re.compile(r"^nvidia\.com/(gfd\.|gpu\.|cuda\.|mig\.|mig-|mps\.|vgpu\.)")


def is_gfd_key(key: str) -> bool:
    return bool(_OWN_KEY.match(key))


def sanitise(name: str) -> str:
    """GFD's: drop characters outside [A-Za-z0-9-_. ], join the words with '-'."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", name).split())


def family(compute_capability: str) -> str:
    major, minor = (int(x) for x in compute_capability.split("."))
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major == 8:
        return "ada-lovelace" if minor == 9 else "ampere"
    return {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell",
            12: "blackwell", 13: "rubin"}.get(major, "undefined")  # fmt: skip


def _versions(profile: GpuProfile) -> dict[str, str]:
    driver = profile.driver_version.split(".")
    major, minor, rev = driver[0], driver[1], driver[2] if len(driver) > 2 else ""
    cuda_major, cuda_minor = profile.cuda_driver_version.split(".")
    return {
        "cuda.driver.major": major,
        "cuda.driver.minor": minor,
        "cuda.driver.rev": rev,
        "cuda.driver-version.major": major,
        "cuda.driver-version.minor": minor,
        "cuda.driver-version.revision": rev,
        "cuda.driver-version.full": profile.driver_version,
        "cuda.runtime.major": cuda_major,
        "cuda.runtime.minor": cuda_minor,
        "cuda.runtime-version.major": cuda_major,
        "cuda.runtime-version.minor": cuda_minor,
        "cuda.runtime-version.full": profile.cuda_driver_version,
    }


@dataclass(frozen=True)
class Shared:
    """GPU sharing as the device plugin's config sets it (GFD reads the same file)."""

    strategy: str = "none"  # none, time-slicing, mps
    replicas: Mapping[str, int] = field(default_factory=dict)  # resource name -> replicas
    renamed: bool = False  # renameByDefault: <name>.shared instead of a -SHARED product

    def of(self, resource: str) -> tuple[str, str, str]:
        """(replicas, sharing-strategy, product suffix) of a resource."""
        n = self.replicas.get(resource, 1)
        if n < 2:
            return "1", "none", ""
        return str(n), self.strategy, "" if self.renamed else "-SHARED"


NOT_SHARED = Shared()


def _gpu_resource(
    profile: GpuProfile, count: int, mig_on: bool, shared: Shared = NOT_SHARED
) -> dict[str, str]:
    major, minor = profile.cuda_compute_capability.split(".")
    replicas, strategy, suffix = shared.of(PREFIX + "gpu")
    return {
        "gpu.product": sanitise(profile.product_name) + ("" if mig_on else suffix),
        "gpu.count": str(count),
        "gpu.replicas": "0" if mig_on else replicas,
        "gpu.sharing-strategy": "none" if mig_on else strategy,
        "gpu.memory": str(profile.memory_mib),
        "gpu.family": family(profile.cuda_compute_capability),
        "gpu.compute.major": major,
        "gpu.compute.minor": minor,
    }


def profile_in_resource_name(mig_profile: str) -> str:
    """How NVIDIA spells a MIG profile in resource names and labels: `1g.10gb+me` -> `1g.10gb.me`."""
    return mig_profile.replace("+", ".")


def _mig_resource(
    prefix: str, profile: GpuProfile, mig: MigProfile, count: int, shared: Shared = NOT_SHARED
) -> dict[str, str]:
    name = profile_in_resource_name(mig.name)
    replicas, strategy, suffix = shared.of(PREFIX + ("gpu" if prefix == "gpu" else f"mig-{name}"))
    return {
        f"{prefix}.product": f"{sanitise(profile.product_name)}-MIG-{name}{suffix}",
        f"{prefix}.count": str(count),
        f"{prefix}.replicas": replicas,
        f"{prefix}.sharing-strategy": strategy,
        f"{prefix}.memory": str(mig.memory_mib or 0),
        f"{prefix}.multiprocessors": str(mig.multiprocessors or 0),
        # compute slices of the GI profile ("3g"), and of its one full-size compute instance
        f"{prefix}.slices.gi": mig.name.split("g", 1)[0],
        f"{prefix}.slices.ci": mig.name.split("g", 1)[0],
        f"{prefix}.engines.copy": str(mig.copy_engines or 0),
        f"{prefix}.engines.decoder": str(mig.decoders or 0),
        f"{prefix}.engines.encoder": str(mig.encoders or 0),
        f"{prefix}.engines.jpeg": str(mig.jpeg_engines or 0),
        f"{prefix}.engines.ofa": str(mig.ofa_engines or 0),
    }


def mig_enabled(gpu: PhysicalGpu) -> bool:
    """MIG mode as NVML reports it: on with static MIG, and with dynamic MIG where toggling it needs
    a reset (Ampere: on for good); a dynamic-MIG Hopper serves whole until a claim splits it."""
    return not gpu.offers_full_gpu


def _mig_devices(gpus: Sequence[PhysicalGpu]) -> list[tuple[GpuProfile, MigProfile]]:
    """The MIG devices that exist (static MIG: pre-created; dynamic ones come and go with claims
    and are not labelled, as GFD run before any claim would see none)."""
    out = []
    for gpu in gpus:
        for placement in gpu.static_mig:
            mig = gpu.profile.mig_profile(placement.profile)
            if mig is not None:
                out.append((gpu.profile, mig))
    return out


def gfd_labels(
    inventory: Inventory, mig_strategy: str = "none", machine: str = "unknown", shared: Shared = NOT_SHARED
) -> dict[str, str]:
    """Node labels (keys with the nvidia.com/ prefix) for the inventory, without the timestamp."""
    if mig_strategy not in MIG_STRATEGIES:
        raise ValueError(f"MIG strategy {mig_strategy!r} is not one of {', '.join(MIG_STRATEGIES)}")
    gpus = sorted(inventory.gpus, key=lambda g: g.index)
    labels: dict[str, str] = {"gpu.machine": sanitise(machine) or "unknown"}
    if not gpus:
        return {PREFIX + k: v for k, v in labels.items()}
    labels |= _versions(gpus[0].profile)
    labels |= {
        "mig.capable": str(any(g.profile.mig_capable for g in gpus)).lower(),
        "mps.capable": str(shared.strategy == "mps").lower(),
        "gpu.mode": "compute",
        "vgpu.present": "false",
        "gpu.present": "true",
    }
    if inventory.imex_clique_id:
        labels["gpu.clique"] = inventory.imex_clique_id
    # Full-GPU labels per model; a later one overrides an earlier one, as GFD merges them: the
    # MIG-enabled GPUs' first, so GPUs without MIG (what nvidia.com/gpu is) have the last word.
    for gpu in sorted(gpus, key=lambda g: not mig_enabled(g)):
        same = [g for g in gpus if g.profile.id == gpu.profile.id]
        labels |= _gpu_resource(gpu.profile, len(same), mig_enabled(gpu), shared)
    migs = _mig_devices(gpus)
    if mig_strategy == "single":
        labels["mig.strategy"] = "single"
        names = {m.name for _, m in migs}
        if all(mig_enabled(g) for g in gpus) and len(names) == 1 and migs:
            profile, mig = migs[0]
            labels |= _mig_resource("gpu", profile, mig, len(migs), shared)
        else:  # GFD's labels for an invalid single-strategy setup
            product = f"{sanitise(gpus[0].profile.product_name)}-MIG-INVALID"
            labels |= {"gpu.product": product, "gpu.count": "0", "gpu.replicas": "0", "gpu.memory": "0",
                       "gpu.sharing-strategy": ""}  # fmt: skip
    elif mig_strategy == "mixed":
        labels["mig.strategy"] = "mixed"
        for profile, mig in migs:
            name = profile_in_resource_name(mig.name)
            count = sum(1 for _, m in migs if m.name == mig.name)
            labels |= _mig_resource(f"mig-{name}", profile, mig, count, shared)
    return {PREFIX + k: v for k, v in labels.items()}
