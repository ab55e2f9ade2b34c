"""GPU Feature Discovery's labels for simulated GPUs (docs/reference/dcgm-exporter-and-gfd.md): an H100
node, the MIG strategies, the clique family, shared GPUs, and the label patch that removes only its
own keys (tests/metricsnode.py)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_fake.gpu.gfd import family, gfd_labels, is_gfd_key, sanitise
from dra_fake.gpu.nodelabels import RECORD_ANNOTATION, TIMESTAMP_LABEL, label_patch, removal_patch
from tests.metricsnode import A100_STATIC, T0, H100x2, inventory

# ---- GPU Feature Discovery labels -----------------------------------------------------------------


def test_gfd_labels_of_an_h100_node() -> None:
    labels = gfd_labels(inventory(H100x2), machine="ProLiant DL380 Gen10 (x)")
    assert {k: labels[k] for k in sorted(labels) if k.startswith("nvidia.com/gpu.")} == {
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": "ProLiant-DL380-Gen10-x",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
    }
    assert labels["nvidia.com/cuda.driver-version.full"] == "580.105.08"
    assert labels["nvidia.com/cuda.driver-version.revision"] == "08"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "13.0"
    assert labels["nvidia.com/mig.capable"] == "true" and "nvidia.com/mig.strategy" not in labels
    assert all(is_gfd_key(k) for k in labels)


def test_gfd_mig_strategies() -> None:
    inv = inventory(A100_STATIC)
    mixed = gfd_labels(inv, "mixed")
    assert mixed["nvidia.com/mig.strategy"] == "mixed"
    assert mixed["nvidia.com/mig-1g.5gb.count"] == "1"
    assert mixed["nvidia.com/mig-3g.20gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"
    assert mixed["nvidia.com/mig-3g.20gb.slices.gi"] == "3"
    assert mixed["nvidia.com/gpu.replicas"] == "0"  # the MIG-enabled GPU itself
    invalid = gfd_labels(inv, "single")  # two profiles: single cannot describe it
    assert invalid["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert invalid["nvidia.com/gpu.count"] == "0"
    one = A100_STATIC | {
        "gpus": [
            A100_STATIC["gpus"][0]
            | {"migDevices": [{"profile": "3g.20gb", "start": 0}, {"profile": "3g.20gb", "start": 4}]}
        ]
    }
    single = gfd_labels(inventory(one), "single")
    assert single["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"
    assert (single["nvidia.com/gpu.count"], single["nvidia.com/gpu.memory"]) == ("2", "19968")
    with pytest.raises(ValueError, match="MIG strategy"):
        gfd_labels(inv, "double")
    # dynamic MIG: a Hopper serves whole until a claim splits it (MIG off for NVML), an A100 keeps MIG on
    hopper = gfd_labels(inventory({"gpus": [{"profile": "h100-sxm5-80gb", "mig": "dynamic"}]}))
    ampere = gfd_labels(inventory({"gpus": [{"profile": "a100-sxm4-40gb", "mig": "dynamic"}]}))
    assert (hopper["nvidia.com/gpu.replicas"], ampere["nvidia.com/gpu.replicas"]) == ("1", "0")
    # a whole GPU beside a MIG-enabled one: the whole one describes nvidia.com/gpu, whatever the order
    both = {"gpus": [{"profile": "h100-sxm5-80gb"}, A100_STATIC["gpus"][0]]}
    labels = gfd_labels(inventory(both), "mixed")
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.replicas"]) == (
        "NVIDIA-H100-80GB-HBM3",
        "1",
    )


def test_gfd_clique_family_and_sanitise() -> None:
    clique = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1"
    labels = gfd_labels(inventory({"gpus": [{"profile": "gb200", "count": 4}], "imexCliqueID": clique}))
    assert labels["nvidia.com/gpu.clique"] == clique and labels["nvidia.com/gpu.family"] == "blackwell"
    assert [family(cc) for cc in ("7.0", "7.5", "8.0", "8.9", "9.0", "10.0", "12.0", "13.0", "4.0")] == [
        "volta", "turing", "ampere", "ada-lovelace", "hopper", "blackwell", "blackwell", "rubin", "undefined",
    ]  # fmt: skip
    assert sanitise("NVIDIA A100-SXM4-40GB (rev/a)") == "NVIDIA-A100-SXM4-40GB-reva"
    assert gfd_labels(inventory({"gpus": [{"profile": "t4"}]}))["nvidia.com/gpu.product"] == "Tesla-T4"


def test_label_patch_records_its_keys_and_removes_only_those() -> None:
    wanted = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "X"}
    node: dict[str, Any] = {
        "metadata": {"labels": {"nvidia.com/gpu.deploy.x": "true", "nvidia.com/mig-1g.5gb.count": "1"}}
    }
    patch = label_patch(node, wanted, T0)
    assert patch is not None
    assert patch["metadata"]["labels"] == wanted | {TIMESTAMP_LABEL: str(int(T0))}
    assert patch["metadata"]["annotations"][RECORD_ANNOTATION] == "gfd.timestamp,gpu.count,gpu.product"
    node["metadata"]["labels"] |= patch["metadata"]["labels"]
    node["metadata"]["annotations"] = patch["metadata"]["annotations"]
    assert label_patch(node, wanted, T0 + 60) is None  # nothing changed: no write, no new timestamp
    smaller = label_patch(node, {"nvidia.com/gpu.count": "8"}, T0 + 60)
    assert smaller is not None and smaller["metadata"]["labels"]["nvidia.com/gpu.product"] is None
    removal = removal_patch(node)
    assert removal == {
        "metadata": {
            "labels": {TIMESTAMP_LABEL: None, "nvidia.com/gpu.count": None, "nvidia.com/gpu.product": None},
            "annotations": {RECORD_ANNOTATION: None},
        }
    }  # labels it did not write (the operator's gpu.deploy.x, an older mig-* label) stay
    assert removal_patch({"metadata": {"labels": {"nvidia.com/gpu.count": "1"}}}) is None


def test_gfd_labels_of_shared_gpus() -> None:
    from dra_fake.gpu.gfd import Shared

    inv = inventory(H100x2)
    shared = gfd_labels(inv, shared=Shared("time-slicing", {"nvidia.com/gpu": 4}))
    assert shared["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert (shared["nvidia.com/gpu.replicas"], shared["nvidia.com/gpu.sharing-strategy"]) == (
        "4",
        "time-slicing",
    )
    renamed = gfd_labels(inv, shared=Shared("time-slicing", {"nvidia.com/gpu": 4}, renamed=True))
    assert renamed["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"  # nvidia.com/gpu.shared tells instead
    mps = gfd_labels(inv, shared=Shared("mps", {"nvidia.com/gpu": 2}))
    assert (mps["nvidia.com/mps.capable"], mps["nvidia.com/gpu.sharing-strategy"]) == ("true", "mps")
    mixed = gfd_labels(
        inventory(A100_STATIC), "mixed", shared=Shared("time-slicing", {"nvidia.com/mig-1g.5gb": 2})
    )
    assert mixed["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"
    assert mixed["nvidia.com/mig-1g.5gb.replicas"] == "2" and mixed["nvidia.com/mig-3g.20gb.replicas"] == "1"
