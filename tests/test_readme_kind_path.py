"""README.md's kind path (e2e/kindcluster/readme.py): the blocks the kind lane runs are found, name
files that exist for every release, and agree with the chart and the example files."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from e2e.kindcluster import readme
from e2e.kindcluster.config import example_path
from e2e.kindcluster.versions import PUBLIC_NODE_IMAGES, REPO
from e2e.kube import in_version

MINORS = sorted(PUBLIC_NODE_IMAGES)
README_TEXT = readme.README.read_text()


def test_the_three_blocks_are_extracted_in_order() -> None:
    steps = readme.blocks()
    assert list(steps) == list(readme.STEPS)
    assert "kind create cluster" in steps["install"] and "nvidia-smi -L" in steps["install"]
    assert "helm upgrade" in steps["upgrade"] and "helm uninstall" in steps["uninstall"]


def test_a_marker_without_its_block_or_twice_is_an_error() -> None:
    text = README_TEXT.replace("<!-- kind-path:upgrade -->\n```sh", "<!-- kind-path:upgrade -->\n```")
    with pytest.raises(ValueError, match="kind-path:upgrade"):
        readme.blocks(text)
    twice = README_TEXT + "\n<!-- kind-path:install -->\n```sh\ntrue\n```\n"
    with pytest.raises(ValueError, match="twice"):
        readme.blocks(twice)


@pytest.mark.parametrize("minor", MINORS)
def test_every_file_a_block_names_exists_for_each_release(minor: int) -> None:
    named = [p for block in readme.blocks().values() for p in readme.referenced_files(block, minor)]
    assert example_path(minor) in named
    pod = REPO / (readme.V1BETA1_POD if minor < 34 else readme.V1_POD)
    assert pod in named and (REPO / "charts" / "dra-fake") in named
    assert [p for p in named if not p.exists()] == []


@pytest.mark.parametrize("minor", MINORS)
def test_each_block_is_valid_bash(minor: int) -> None:
    for step, block in readme.blocks().items():
        script = readme.for_release(block, minor)
        done = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{step}: {done.stderr}"


def test_the_image_built_is_the_charts_default_and_the_upgrade_its_version() -> None:
    """docker build's tag is the chart's appVersion (image.tag "" = appVersion), so helm install needs
    no --set; the upgrade installs the release whose files make release writes."""
    chart = yaml.safe_load((REPO / "charts" / "dra-fake" / "Chart.yaml").read_text())
    steps = readme.blocks()
    install = readme.expand(steps["install"], 37)
    [built] = re.findall(r"docker build -t (\S+) \.", install)
    assert built == f"dra-fake:{chart['appVersion']}"
    assert f"kind load docker-image {built} --name {readme.CLUSTER}" in install
    upgrade = readme.expand(steps["upgrade"], 37)
    version = chart["appVersion"]
    assert f"make release VERSION={version}" in upgrade
    assert f"dist/{version}/dra-fake-{version}.image.tar" in upgrade
    assert f"helm upgrade dra-fake dist/{version}/dra-fake-{version}.tgz" in upgrade
    # every kind command names the README's cluster
    kind_lines = [line for b in steps.values() for line in b.splitlines() if line.startswith("kind ")]
    assert kind_lines and all(f"--name {readme.CLUSTER}" in line for line in kind_lines)


def test_the_release_is_chosen_on_one_line() -> None:
    install = readme.blocks()["install"]
    assert readme.for_release(install, 33).startswith("K8S=1.33 ")
    with pytest.raises(ValueError, match="one line"):
        readme.for_release(install + "K8S=1.34\n", 33)


def test_the_v1beta1_pod_is_the_v1_pod_in_that_version() -> None:
    v1 = list(yaml.safe_load_all((REPO / readme.V1_POD).read_text()))
    v1beta1 = list(yaml.safe_load_all((REPO / readme.V1BETA1_POD).read_text()))
    assert [in_version(doc, "v1beta1") for doc in v1] == v1beta1
    assert [d["kind"] for d in v1] == ["ResourceClaimTemplate", "Pod"]
    assert v1[1]["metadata"]["name"] == "gpu-pod"  # what the README's kubectl wait and exec name
