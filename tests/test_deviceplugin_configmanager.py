"""`dra-fake device-plugin`'s per-node config: the node label selects it, as NVIDIA's config-manager
(docs/reference/nvidia-device-plugin.md B.9); a label change restarts with the selected config, which
is loaded."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_fake.deviceplugin.configselect import ConfigSelectionError, ConfigSet, parse_fallbacks
from dra_fake.deviceplugin.labelwatch import ConfigLabelWatch
from dra_fake.deviceplugin.plugin import load
from tests.devicepluginnode import NODE, TIME_SLICING

# ---- per-node config: the node label, as NVIDIA's config-manager (B.9) ---------------------------


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    """A ConfigMap volume as the kubelet lays it out: files, and `..data` entries to skip."""
    d = tmp_path / "configs"
    (d / "..2026_01_01").mkdir(parents=True)
    (d / "..data").symlink_to("..2026_01_01")
    (d / "default").write_text("version: v1\n")
    (d / "ts-4").write_text(TIME_SLICING)
    return d


def test_config_selection_as_config_manager(configs: Path) -> None:
    named = ConfigSet(configs, fallbacks=("named", "single"))
    assert named.names() == ["default", "ts-4"]
    assert named.select("ts-4") == "ts-4" and named.select("") == "default"
    assert ConfigSet(configs, default="ts-4").select("") == "ts-4"
    for label in ("nope", "..data", ".."):  # only the directory's files are names
        with pytest.raises(
            ConfigSelectionError, match=f"^specified config {re.escape(label)} does not exist$"
        ):
            named.select(label)
    with pytest.raises(ConfigSelectionError, match=r"^specified config gone does not exist$"):
        ConfigSet(configs, default="gone").select("")
    (configs / "default").unlink()
    assert ConfigSet(configs, fallbacks=("named", "single")).select("") == "ts-4"  # the only one
    (configs / "other").write_text("")
    assert ConfigSet(configs, fallbacks=("named", "single", "empty")).select("") == ""
    assert ConfigSet(configs).text("") is None and "timeSlicing" in (ConfigSet(configs).text("ts-4") or "")
    with pytest.raises(
        ConfigSelectionError, match=r"^no config was set, no default was provided, and all fallbacks failed$"
    ):
        ConfigSet(configs, fallbacks=("named", "single")).select("")
    with pytest.raises(ConfigSelectionError, match=r"^unknown fallback strategy: first$"):
        parse_fallbacks("named,first")
    with pytest.raises(ConfigSelectionError, match=r"^unknown fallback strategy: a\\nb$"):  # one line
        parse_fallbacks("a\nb")
    assert parse_fallbacks("named, single") == ("named", "single") and parse_fallbacks("") == ()
    empty = configs.parent / "empty"
    empty.mkdir()
    with pytest.raises(ConfigSelectionError, match=r"^no configuration files available$"):
        ConfigSet(empty).select("x")
    with pytest.raises(ConfigSelectionError, match="error reading directory"):
        ConfigSet(configs.parent / "missing").select("x")


class FakeLabel:
    """A node's label values as GET and WATCH would return them."""

    key = "nvidia.com/device-plugin.config"

    def __init__(self, first: str, changes: list[str]) -> None:
        self.first, self.pending = first, changes

    def get(self) -> tuple[str, str]:
        return self.first, "1"

    def changes(self, version: str) -> Iterator[tuple[str, str]]:
        for i, value in enumerate(self.pending):
            yield value, str(i + 2)


def test_label_changes_restart_with_the_selected_config(configs: Path) -> None:
    (configs / "ts-2").write_text(TIME_SLICING.replace("replicas: 4", "replicas: 2"))
    restarts: list[str] = []
    # started with ts-4; the label then names an unknown config (kept), ts-4 again (nothing to do),
    # is removed (the default), and finally names ts-2
    label = FakeLabel("ts-4", ["nope", "ts-4", "", "ts-2"])
    watch = ConfigLabelWatch(
        label,
        ConfigSet(configs, fallbacks=("named",)),
        "ts-4",
        restarts.append,
    )
    watch.step(threading.Event())
    assert restarts == ["default", "ts-2"] and watch.current == "ts-2"
    # the first GET already differs from the config the plugin started with
    first: list[str] = []
    ConfigLabelWatch(FakeLabel("", []), ConfigSet(configs, default="ts-2"), "ts-4", first.append).step(
        threading.Event()
    )
    assert first == ["ts-2"]


def test_the_selected_config_is_loaded(configs: Path) -> None:
    from dra_fake.cli import build_parser

    args = build_parser().parse_args(
        [
            "device-plugin",
            "--node-name",
            NODE,
            f"--config-file-srcdir={configs}",
            "--config-file=/nonexistent",
        ]
    )
    config, _, [gpus] = load(args, "ts-4")  # the label's config, not CONFIG_FILE
    assert config.sharing.replicas("nvidia.com/gpu") == 4 and len(gpus.devices) == 32
    config, _, [gpus] = load(args, "default")
    assert config.sharing.strategy == "" and len(gpus.devices) == 8
    assert (args.node_label, args.default_config, args.fallback_strategies) == (
        "nvidia.com/device-plugin.config",
        "",
        "",
    )  # config-manager's defaults
