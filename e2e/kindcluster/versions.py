"""The Kubernetes releases the kind lanes build, and what each minor needs switched on.

One pinned patch release per minor: e2e/kind/k8s/<minor>/K8S_VERSION (the Go module the node
image's binaries come from), and e2e/cluster/K8S_VERSION for the local control plane's release.
Feature gates come from each release's pkg/features/kube_features.go (docs/kind.md has the table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULE_DIRS = [REPO / "e2e" / "cluster", *sorted((REPO / "e2e" / "kind" / "k8s").glob("*"))]


@dataclass(frozen=True, order=True)
class Release:
    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> Release:
        m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", text.strip())
        if not m:
            raise ValueError(f"not a Kubernetes release: {text!r} (expected vX.Y.Z)")
        return cls(*map(int, m.groups()))

    @property
    def tag(self) -> str:
        return f"v{self.major}.{self.minor}.{self.patch}"

    @property
    def short(self) -> str:
        """The minor, e.g. "1.33": names the cluster and its state directory."""
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:
        return self.tag


# The public kindest/node image of each minor that users' kind configs name (examples/kind/,
# e2e/kind/run.sh): images published with kind releases.
PUBLIC_NODE_IMAGES = {
    32: "v1.32.2",
    33: "v1.33.1",
    34: "v1.34.0",
    35: "v1.35.0",
    36: "v1.36.1",
    37: "v1.37.0",
}


def public_node_image(minor: int) -> str:
    try:
        return f"kindest/node:{PUBLIC_NODE_IMAGES[minor]}"
    except KeyError:
        raise ValueError(f"no public kindest/node image known for 1.{minor}: set KIND_NODE_IMAGE") from None


def pinned() -> list[Release]:
    releases = {
        Release.parse((d / "K8S_VERSION").read_text()) for d in MODULE_DIRS if (d / "K8S_VERSION").exists()
    }
    return sorted(releases)


def resolve(spec: str, pinned_only: bool = True) -> Release:
    """ "1.33", "1.33.13" or "v1.33.13" -> the pinned release of that minor (or that exact one).
    With pinned_only=False a full version that is not pinned is taken as is (public node images)."""
    spec = spec.strip().removeprefix("v")
    for release in pinned():
        if spec in (release.short, release.tag.removeprefix("v")):
            return release
    if not pinned_only and re.fullmatch(r"\d+\.\d+\.\d+", spec):
        return Release.parse(spec)
    known = ", ".join(r.tag for r in pinned())
    raise ValueError(f"Kubernetes {spec} is not pinned for kind (pinned: {known})")


def newest() -> Release:
    return pinned()[-1]


def feature_gates(release: Release) -> dict[str, bool]:
    """Kubernetes gates of the DRA features dra-fake simulates, where they are not on by default.

    1.32/1.33: DRA is beta and off (DynamicResourceAllocation on every component); 1.32 has a claim's
    device status as alpha (DRAResourceClaimDeviceStatus, beta and on from 1.33); 1.33 also has
    partitionable devices (dynamic MIG) and device taints as alpha. 1.34/1.35: DRA is GA; partitionable
    devices, device taints, consumable capacity and extended resources are alpha. 1.36+: all beta
    or GA and on; setting them true stays valid (also for the gates locked on in 1.37).
    DeviceTaintRules: beta and off in 1.36 (its API version, v1beta2, is off too: runtime_config),
    GA in 1.37.
    """
    if release.minor <= 32:
        return {"DynamicResourceAllocation": True, "DRAResourceClaimDeviceStatus": True}
    if release.minor == 33:
        return {"DynamicResourceAllocation": True, "DRAPartitionableDevices": True, "DRADeviceTaints": True}
    gates = {
        "DRAPartitionableDevices": True,
        "DRADeviceTaints": True,
        "DRAConsumableCapacity": True,
        "DRAExtendedResource": True,
    }
    if release.minor == 36:
        gates["DRADeviceTaintRules"] = True
    return gates


def runtime_config(release: Release) -> dict[str, str]:
    """resource.k8s.io versions to serve: 1.32 has only v1beta1, 1.33 adds v1beta2 (both off by
    default); from 1.34 v1 is served by default and the betas stay off, as on users' clusters.

    1.33 to 1.35 serve DeviceTaintRule only in v1alpha3: with the DRADeviceTaints gate on and that
    version off, the 1.33 and 1.34 schedulers wait forever for their DeviceTaintRule informer and
    never become ready (docs/reference/kind-offline.md#dra-per-kubernetes-minor). 1.36 serves it in
    v1beta2, off by default: switched on with the DRADeviceTaintRules gate (feature_gates), as the
    scheduler and kube-controller-manager read it there; 1.37 serves it in v1."""
    if release.minor <= 32:
        return {"resource.k8s.io/v1beta1": "true"}
    if release.minor == 33:
        return {
            "resource.k8s.io/v1beta1": "true",
            "resource.k8s.io/v1beta2": "true",
            "resource.k8s.io/v1alpha3": "true",
        }
    if release.minor <= 35:
        return {"resource.k8s.io/v1alpha3": "true"}
    if release.minor == 36:
        return {"resource.k8s.io/v1beta2": "true"}
    return {}


def partitionable_devices(release: Release) -> bool:
    """Whether dynamic MIG (counters in ResourceSlices) is available with feature_gates()."""
    return release.minor >= 33
