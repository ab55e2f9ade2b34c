"""Whether the API server keeps the ResourceSlice fields a feature needs, decided once at start-up,
before the first slice is published: the one probe behind every such start-up refusal (consumable
shares, binding conditions, device taints: dra_fake.gpu.sharesgate, attachgate, lendinggate hold
their data).

A server that is too old is refused by its version. A newer one is asked with a dry-run create of a
one-device slice that uses the fields: a server with the feature gate off accepts it and silently
drops them, so a slice published anyway would half work; the plugin refuses to run instead, naming
the gate. The dry run is retried while the API server is away or busy; an answer refusing it (4xx)
is the reason.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dra_fake.core.slices import DesiredSlice, slice_manifest, slice_spec

if TYPE_CHECKING:
    from kubernetes import client

    from dra_fake.core.resourceapi import ServerInfo

log = logging.getLogger(__name__)

Version = tuple[int, int]


@dataclass(frozen=True)
class FieldGate:
    """One feature's probe, as data. Messages are str.format templates of `{setting}` (what turned
    the feature on, as refusals name it: `--gpu-lending`) and, in `too_old`, `{server}` (the API
    server's gitVersion)."""

    event_reason: str  # the reason of the Warning Node event that carries the refusal
    name: str  # in the retry's log line: `<name> dry-run ResourceSlice`
    probe_device: dict[str, Any]  # a v1 device using the fields
    device_kept: Callable[[dict[str, Any]], bool]  # whether a stored device still has them
    too_old: tuple[tuple[Version, str], ...]  # (the first version that can serve it, why not), oldest first
    dropped: str  # the refusal when the dry run dropped the fields: names the feature gate
    probe_noun: str  # `a dry-run ResourceSlice with <probe_noun>` in the refusal of a 4xx answer
    kept_noun: str  # `the API server keeps <kept_noun>`, logged when it does

    def version_refusal(self, setting: str, version: Version, server: str) -> str | None:
        """Why a server of `version` (gitVersion `server`) cannot serve the feature, or None when
        only the dry run can tell."""
        for since, why in self.too_old:
            if version < since:
                return why.format(setting=setting, server=server)
        return None

    def dropped_refusal(self, setting: str) -> str:
        """The server accepted the probe but dropped its fields: its gate is off."""
        return self.dropped.format(setting=setting)

    def fields_kept(self, stored: dict[str, Any]) -> bool:
        """Whether the dry run's answer still has the fields."""
        devices = (stored.get("spec") or {}).get("devices") or []
        if not devices:
            return False
        return self.device_kept(devices[0].get("basic", devices[0]))  # v1beta1 nests the device's fields

    def probe_manifest(self, server: ServerInfo, driver: str, node: str) -> dict[str, Any]:
        """A one-device slice of this node's pool with the probe device, for a dry run (nothing is
        stored; it names this node, as the chart's admission policy requires)."""
        version = server.resource_version
        device = self.probe_device
        spec = slice_spec(
            DesiredSlice(devices=[device]),
            api_version=version,
            driver=driver,
            pool_name=node,
            node_name=node,
            generation=1,
            slice_count=1,
        )
        name = f"{node}-{driver}-{device['name']}"
        return slice_manifest(spec, api_version=version, name=name, owner_node_name=node, owner_node_uid=None)

    def server_refusal(
        self,
        setting: str,
        api: client.ApiClient,
        server: ServerInfo,
        driver: str,
        node: str,
        stop: threading.Event,
    ) -> str | None:
        """Why this server cannot serve the feature (its version, else what the dry run kept), or None."""
        from kubernetes.client.exceptions import ApiException

        from dra_fake.core.retry import with_backoff

        if self.version_refusal(setting, server.version, "") is not None:
            return self.version_refusal(
                setting, server.version, with_backoff("GET /version", lambda: git_version(api), stop)
            )

        def probe() -> dict[str, Any] | str:
            try:
                return dry_run_create(api, self.probe_manifest(server, driver, node))
            except ApiException as err:
                if err.status is None or not 400 <= err.status < 500 or err.status == 429:
                    raise  # the server is away or busy: retried
                return (
                    f"{setting}: the API server refused a dry-run ResourceSlice with {self.probe_noun}: "
                    f"{err.status} {err.reason}"
                )

        answer = with_backoff(f"{self.name} dry-run ResourceSlice", probe, stop)
        if isinstance(answer, str):
            return answer
        if not self.fields_kept(answer):
            return self.dropped_refusal(setting)
        log.info("the API server keeps %s", self.kept_noun, extra={"setting": setting})
        return None


def dry_run_create(api: client.ApiClient, manifest: dict[str, Any]) -> dict[str, Any]:
    """POST the slice with dryRun=All; the object as the server would have stored it."""
    from dra_fake.core.kube import release, request

    version = manifest["apiVersion"]
    resp = request(api, "POST", f"/apis/{version}/resourceslices", query={"dry_run": "All"}, body=manifest)
    try:
        answer: dict[str, Any] = json.loads(resp.read())
    finally:
        release(resp)
    return answer


def git_version(api: client.ApiClient) -> str:
    from dra_fake.core.kube import get_json

    return str(get_json(api, "/version").get("gitVersion", "unknown"))
