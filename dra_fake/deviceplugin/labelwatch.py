"""The per-node config label, read and watched as NVIDIA's config-manager does, on the plugin's own
Node only: GET it, then WATCH it with the field selector `metadata.name=<node>` (RBAC: `nodes` get
and watch, no list). When the label selects another config the plugin restarts with it, as NVIDIA's
plugin does on the sidecar's SIGHUP; a name that does not exist is logged with config-manager's
error and the running config kept (NVIDIA's sidecar exits with it and is restarted, the plugin keeps
serving). Facts: docs/reference/nvidia-device-plugin.md#b9-per-node-configuration-config-manager.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake.core.informer import WATCH_SECONDS, lister, stream_events
from dra_fake.core.kube import read_node
from dra_fake.core.retry import run_forever
from dra_fake.deviceplugin.configselect import ConfigSelectionError, ConfigSet

log = logging.getLogger(__name__)


def label_of(node: dict[str, Any], key: str) -> str:
    return str(((node.get("metadata") or {}).get("labels") or {}).get(key, ""))


class NodeLabel:
    """One node's label through the API: its value now, and its changes."""

    def __init__(self, api: client.ApiClient, node: str, key: str) -> None:
        self.api, self.node, self.key = api, node, key

    def get(self) -> tuple[str, str]:
        """(value, resourceVersion)."""
        obj = read_node(self.api, self.node)
        return label_of(obj, self.key), str(obj["metadata"]["resourceVersion"])

    def changes(self, version: str) -> Iterator[tuple[str, str]]:
        """(value, resourceVersion) per event until the watch ends; a deleted node has no label.
        Raises ApiException(410) when `version` is too old."""
        events = stream_events(
            lister(self.api, "/api/v1/nodes", metadata_only=True),
            field_selector=f"metadata.name={self.node}",
            resource_version=version,
            timeout_seconds=WATCH_SECONDS,
        )
        for event in events:
            kind, obj = event["type"], event["object"]
            if kind == "ERROR":
                raise ApiException(status=int(obj.get("code") or 500), reason=str(obj.get("message")))
            value = "" if kind == "DELETED" else label_of(obj, self.key)
            yield value, str(obj["metadata"]["resourceVersion"])


class LabelSource(Protocol):
    key: str

    def get(self) -> tuple[str, str]: ...
    def changes(self, version: str) -> Iterator[tuple[str, str]]: ...


class ConfigLabelWatch:
    """Calls `restart(name)` once when the label selects a config other than `current`."""

    def __init__(
        self, label: LabelSource, configs: ConfigSet, current: str, restart: Callable[[str], None]
    ) -> None:
        self.label, self.configs, self.current, self.restart = label, configs, current, restart
        self.seen: str | None = None  # the label value last acted on

    def start(self, stop: threading.Event) -> threading.Thread:
        def step() -> None:
            self.step(stop)

        thread = threading.Thread(
            target=run_forever, args=("node label watch", step, stop, 0.0), name="config-label", daemon=True
        )
        thread.start()
        return thread

    def step(self, stop: threading.Event) -> None:
        """GET, then WATCH until the watch ends (a 410 or a failure: GET again)."""
        log.info("Waiting for change to '%s' label", self.label.key)
        value, version = self.label.get()
        self.observe(value)
        try:
            for value, _ in self.label.changes(version):
                if stop.is_set():
                    return
                self.observe(value)
        except ApiException as err:
            if err.status != 410:  # 410 Gone: the version expired; GET again at once
                raise

    def observe(self, value: str) -> bool:
        """Act on the label's value if it changed; True when a restart was asked for."""
        if value == self.seen:
            return False
        if self.seen is not None:
            log.info("Label change detected: %s=%s", self.label.key, value)
        self.seen = value
        try:
            name = self.configs.select(value)
        except ConfigSelectionError as err:
            log.error("%s; keeping config %r", err, self.current)
            return False
        if name == self.current:
            log.info("Already configured. Skipping update...")
            return False
        if name:
            log.info("Updating to config: %s", name)
        else:
            log.info("Updating to empty config")
        self.current = name
        self.restart(name)
        return True


def reexec() -> None:
    """Start this process anew with the same arguments and environment (same PID, same container):
    NVIDIA's plugin restarts in place on the sidecar's SIGHUP; a fresh start reads the new config
    on the same path as the first one did."""
    log.info("restarting with the new config")
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "dra_fake", *sys.argv[1:]])
