"""The kind cluster configuration e2e.kindcluster writes for each pinned release."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kindcluster.config import (
    EXAMPLES,
    HostFacts,
    dump,
    example,
    example_path,
    kind_config,
    scheduler_file,
)
from e2e.kindcluster.versions import PUBLIC_NODE_IMAGES, Release, pinned

# DeviceTaintRule is served only in v1alpha3 up to 1.35 (k8s.io/api/resource/*/types.go); from 1.36
# the scheduler copes without it. docs/reference/kind-offline.md#dra-per-kubernetes-minor.
NEEDS_V1ALPHA3 = (33, 34, 35)

LAPTOP = HostFacts(cgroup_v1=False, can_lower_oom_score=True)
CI_HOST = HostFacts(cgroup_v1=True, can_lower_oom_score=False)


def config_of(minor: int, host: HostFacts = LAPTOP, offline: bool = True) -> dict[str, object]:
    release = Release(1, minor, 0)
    # Round trip through the YAML kind reads, so what is asserted is what kind gets.
    loaded = yaml.safe_load(dump(kind_config(release, [{"pool": "a"}], host, offline=offline)))
    assert isinstance(loaded, dict)
    return loaded


@pytest.mark.parametrize("minor", NEEDS_V1ALPHA3)
def test_device_taints_gate_comes_with_its_api_version(minor: int) -> None:
    """The 1.33 and 1.34 schedulers never become ready when the gate is on and the API is not served."""
    config = config_of(minor)
    assert config["featureGates"]["DRADeviceTaints"] is True  # type: ignore[index]
    assert config["runtimeConfig"]["resource.k8s.io/v1alpha3"] == "true"  # type: ignore[index]


def test_a_1_32_cluster_serves_v1beta1_with_dra_and_device_status_on_and_no_later_gates() -> None:
    """DRAResourceClaimDeviceStatus is alpha in 1.32: without it the server drops the status the
    plugin writes (e2e/test_device_status.py)."""
    config = config_of(32)
    assert config["featureGates"] == {"DynamicResourceAllocation": True, "DRAResourceClaimDeviceStatus": True}
    assert config["runtimeConfig"] == {"resource.k8s.io/v1beta1": "true"}


def test_from_1_34_the_beta_apis_stay_off_as_on_users_clusters() -> None:
    for minor in (34, 35, 37):
        runtime = config_of(minor).get("runtimeConfig", {})
        assert isinstance(runtime, dict)
        assert not [v for v in runtime if "beta" in v], f"1.{minor}: {runtime}"


def test_1_36_serves_device_taint_rules_in_v1beta2_with_their_gate() -> None:
    """1.36: DeviceTaintRule only in v1beta2 (off by default), read by the scheduler and
    kube-controller-manager only with DRADeviceTaintRules (beta, off): both or neither."""
    config = config_of(36)
    assert config["runtimeConfig"] == {"resource.k8s.io/v1beta2": "true"}
    assert config["featureGates"]["DRADeviceTaintRules"] is True  # type: ignore[index]
    for minor in (35, 37):  # 1.35: alpha, not turned on here; 1.37: GA
        assert "DRADeviceTaintRules" not in config_of(minor)["featureGates"]  # type: ignore[operator]


def test_host_facts_shape_the_node_config() -> None:
    ci = config_of(35, CI_HOST)
    patch = ci["containerdConfigPatches"]
    assert isinstance(patch, list) and "restrict_oom_score_adj = true" in patch[0]
    assert ci["kubeadmConfigPatches"] == ["kind: KubeletConfiguration\nfailCgroupV1: false\n"]
    # cgroup v1 is refused only from 1.35; an older kubelet gets no patch it would not know.
    assert "kubeadmConfigPatches" not in config_of(34, CI_HOST)
    laptop = config_of(37)
    assert "restrict_oom_score_adj" not in laptop["containerdConfigPatches"][0]  # type: ignore[index]


def test_public_node_images_keep_their_cni() -> None:
    assert config_of(37, offline=True)["networking"] == {"disableDefaultCNI": True}
    online = config_of(37, offline=False)
    assert "networking" not in online
    assert "conf_template" not in online["containerdConfigPatches"][0]  # type: ignore[index]


def test_every_pinned_minor_is_covered() -> None:
    """A newly pinned minor must be checked against its DeviceTaintRule version (and the table)."""
    assert {r.minor for r in pinned()} <= {32, *NEEDS_V1ALPHA3, 36, 37}


def test_a_build_stamp_does_not_depend_on_how_the_script_was_invoked(tmp_path: Path) -> None:
    """make runs hack/kind/images.sh, make kind-matrix runs it by absolute path: one key for both.

    A key that hashed the path as given rebuilt every node image on the next run of the other."""
    repo = Path(__file__).resolve().parent.parent
    lib = repo / "hack" / "kind" / "lib.sh"

    def key_of(path: str, cwd: Path) -> str:
        script = f'source "{lib}"; files_key "{path}"'
        env = {"PATH": os.environ["PATH"], "KIND_WORK": str(tmp_path)}
        done = subprocess.run(
            ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    relative = key_of("hack/kind/node-image.sh", repo)
    assert relative == key_of(str(repo / "hack" / "kind" / "node-image.sh"), tmp_path)
    assert relative != key_of("hack/kind/node-base.sh", repo)


def test_the_committed_kind_configs_are_what_config_py_generates() -> None:
    """examples/kind/ (README.md's kind path) cannot drift from the settings the lanes use:
    `make generate` writes them, this compares."""
    committed = sorted(EXAMPLES.glob("kind-*.yaml"))
    assert [p.name for p in committed] == [example_path(m).name for m in sorted(PUBLIC_NODE_IMAGES)]
    for minor in sorted(PUBLIC_NODE_IMAGES):
        assert example_path(minor).read_text() == example(minor), f"make generate: {example_path(minor)}"


@pytest.mark.parametrize("minor", sorted(PUBLIC_NODE_IMAGES))
def test_a_users_kind_config_names_its_release_and_a_gpu_worker(minor: int) -> None:
    config = yaml.safe_load(example_path(minor).read_text())
    nodes = config["nodes"]
    assert [n["role"] for n in nodes] == ["control-plane", "worker"]
    assert {n["image"] for n in nodes} == {f"kindest/node:{PUBLIC_NODE_IMAGES[minor]}"}
    assert PUBLIC_NODE_IMAGES[minor].startswith(f"v1.{minor}.")
    assert "networking" not in config  # kindnetd: the public images' CNI


def test_the_kwok_image_the_bed_loads_is_the_one_the_script_builds() -> None:
    """e2e/kindcluster/kwok.py and hack/kind/kwok-image.sh read the KWOK version from one go.mod."""
    from e2e.kindcluster import kwok

    repo = Path(__file__).resolve().parent.parent
    script = (repo / "hack" / "kind" / "kwok-image.sh").read_text()
    awk = next(line for line in script.splitlines() if line.startswith("version=$(awk"))
    out = subprocess.run(
        ["bash", "-c", f'REPO="{repo}"; {awk}; echo "$version"'], capture_output=True, text=True, check=True
    )
    assert kwok.image() == f"dra-fake-kind/kwok:{out.stdout.strip()}"
    assert out.stdout.strip().startswith("v0.")


def add(document: dict[str, Any], op: dict[str, Any]) -> None:
    """RFC 6902 `add`, as kind applies kubeadmConfigPatchesJSON6902 (objects, or "-": append)."""
    assert op["op"] == "add"
    *parents, last = op["path"].strip("/").split("/")
    target: Any = document
    for key in parents:
        target = target[key]
    if last == "-":
        target.append(op["value"])
    else:
        target[last] = op["value"]


@pytest.mark.parametrize("minor", [36, 37])
def test_from_1_36_the_scheduler_reads_a_binding_timeout_of_20_s_mounted_from_the_host(
    minor: int, tmp_path: Path
) -> None:
    config = yaml.safe_load(
        dump(kind_config(Release(1, minor, 0), [{}], LAPTOP, offline=True, scheduler_dir=tmp_path))
    )
    [mount] = config["nodes"][0]["extraMounts"]
    assert mount == {"hostPath": str(tmp_path), "containerPath": "/etc/kubernetes/dra-fake", "readOnly": True}
    [patch] = config["kubeadmConfigPatchesJSON6902"]
    assert (patch["version"], patch["kind"]) == ("v1beta4", "ClusterConfiguration")
    # kind's v1beta4 ClusterConfiguration: the feature gates are a list entry a merge patch would drop
    kubeadm: dict[str, Any] = {"scheduler": {"extraArgs": [{"name": "feature-gates", "value": "A=true"}]}}
    for op in yaml.safe_load(patch["patch"]):
        add(kubeadm, op)
    scheduler = kubeadm["scheduler"]
    assert scheduler["extraArgs"] == [
        {"name": "feature-gates", "value": "A=true"},
        {"name": "config", "value": "/etc/kubernetes/dra-fake/kube-scheduler.yaml"},
    ]
    assert (
        scheduler["extraVolumes"][0]["hostPath"]
        == scheduler["extraVolumes"][0]["mountPath"]
        == mount["containerPath"]
    )
    file = yaml.safe_load(scheduler_file())
    assert file["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"  # kubeadm's
    assert file["leaderElection"]["leaderElect"] is True
    [plugin] = file["profiles"][0]["pluginConfig"]
    assert (plugin["name"], plugin["args"]["bindingTimeout"]) == ("DynamicResources", "20s")


def test_before_1_36_and_in_users_configs_the_scheduler_keeps_its_defaults(tmp_path: Path) -> None:
    for minor in (32, 33, 34, 35):
        config = kind_config(Release(1, minor, 0), [{}], LAPTOP, offline=True, scheduler_dir=tmp_path)
        assert "kubeadmConfigPatchesJSON6902" not in config and "extraMounts" not in config["nodes"][0]
    for minor in PUBLIC_NODE_IMAGES:
        assert "kubeadmConfigPatchesJSON6902" not in yaml.safe_load(example(minor))
