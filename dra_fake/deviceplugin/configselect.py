"""Which of a set of named configs a node runs, as NVIDIA's config-manager chooses (the init
container and sidecar of NVIDIA's chart): the node label `nvidia.com/device-plugin.config` names a
file of the ConfigMap directory (`CONFIG_FILE_SRCDIR`); without the label `DEFAULT_CONFIG`, else the
fallback strategies in order. Its error messages. Facts:
docs/reference/nvidia-device-plugin.md#b9-per-node-configuration-config-manager.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dra_fake.core.claims import one_line

log = logging.getLogger(__name__)

NODE_LABEL = "nvidia.com/device-plugin.config"
NAMED, SINGLE, EMPTY = "named", "single", "empty"
FALLBACK_STRATEGIES = (NAMED, SINGLE, EMPTY)
NAMED_FALLBACK = "default"  # the config the `named` fallback looks for


class ConfigSelectionError(ValueError):
    """config-manager's error (it exits with it: the plugin's pod does not start, or, once running,
    keeps its config while the sidecar restarts)."""


def parse_fallbacks(raw: str) -> tuple[str, ...]:
    """FALLBACK_STRATEGIES: comma-separated, as the chart joins `config.fallbackStrategies`."""
    out = tuple(s.strip() for s in raw.split(",") if s.strip())
    for strategy in out:
        if strategy not in FALLBACK_STRATEGIES:
            raise ConfigSelectionError(f"unknown fallback strategy: {one_line(strategy)}")  # one log line
    return out


@dataclass(frozen=True)
class ConfigSet:
    srcdir: Path
    default: str = ""
    fallbacks: Sequence[str] = ()

    def names(self) -> list[str]:
        """The config names: the directory's files, without a ConfigMap volume's `..` entries."""
        try:
            entries = sorted(self.srcdir.iterdir())
        except OSError as err:
            raise ConfigSelectionError(
                f"error getting list of configuration files: error reading directory: {err}"
            ) from None
        return [e.name for e in entries if not e.name.startswith("..") and e.is_file()]

    def select(self, label: str) -> str:
        """The config name for the label's value ("" when unset); "" for the empty config."""
        names = self.names()
        if not names:
            raise ConfigSelectionError("no configuration files available")
        if label:
            if label not in names:
                raise ConfigSelectionError(f"specified config {label} does not exist")
            return label
        if self.default:
            log.info("No value set. Selecting default name: %s", self.default)
            if self.default not in names:
                # NVIDIA's message names the (empty) label value here; ours the missing default
                raise ConfigSelectionError(f"specified config {self.default} does not exist")
            return self.default
        log.info("No value set and no default set. Attempting fallback strategies: %s", list(self.fallbacks))
        for strategy in self.fallbacks:
            if strategy == NAMED and NAMED_FALLBACK in names:
                return NAMED_FALLBACK
            if strategy == SINGLE and len(names) == 1:
                return names[0]
            if strategy == EMPTY:
                log.info("Falling back to an empty configuration")
                return ""
        raise ConfigSelectionError("no config was set, no default was provided, and all fallbacks failed")

    def text(self, name: str) -> str | None:
        """The selected config's content; None for the empty config (NVIDIA links /dev/null)."""
        if not name:
            return None
        try:
            return (self.srcdir / name).read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigSelectionError(f"config {name}: {err}") from None
