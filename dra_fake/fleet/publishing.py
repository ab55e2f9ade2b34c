"""A fleet node's publishing: the per-node plugin's Publisher without its threads, reading the
existing slices from the fleet's shared cache and writing into it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake.core.kube import send_json
from dra_fake.core.publisher import Publisher
from dra_fake.core.resourceapi import ResourceApiVersion
from dra_fake.fleet.core import SliceCache

if TYPE_CHECKING:
    from dra_fake.fleet.run import Fleet


class CachedCustom:
    """The slice writes a node's Publisher makes, fed into the shared cache when they succeed.
    Creates and replaces go out as plain JSON (dra_fake.core.kube.send_json): the typed client's
    argument validation and body walk cost more than the HTTP at a thousand nodes."""

    def __init__(self, custom: client.CustomObjectsApi, cache: SliceCache) -> None:
        self._custom = custom
        self._cache = cache

    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: Any) -> Any:
        stored = send_json(self._custom.api_client, "POST", f"/apis/{group}/{version}/{plural}", body)
        self._cache.wrote(stored)
        return stored

    def replace_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, body: Any
    ) -> Any:
        path = f"/apis/{group}/{version}/{plural}/{{name}}"
        stored = send_json(self._custom.api_client, "PUT", path, body, name=name)
        self._cache.wrote(stored)
        return stored

    def delete_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, **kwargs: Any
    ) -> Any:
        try:
            result = self._custom.delete_cluster_custom_object(group, version, plural, name, **kwargs)
        except ApiException as err:
            if err.status == 404:
                self._cache.deleted(name, "0")
            raise
        body = kwargs.get("body")
        rv = getattr(getattr(body, "preconditions", None), "resource_version", None) or "0"
        self._cache.deleted(name, str(rv))
        return result


class NodeApi:
    """The slice of ResourceApi a Publisher uses: the version and the (cached) custom API."""

    def __init__(self, version: ResourceApiVersion, custom: CachedCustom) -> None:
        self.version = version
        self.custom = custom


class NodePublisher(Publisher):
    """The per-node plugin's Publisher, minus its threads: existing slices from the cache."""

    def __init__(self, fleet: Fleet, node: str, uid: str) -> None:
        super().__init__(
            fleet.node_api,  # type: ignore[arg-type]
            fleet.options.driver,
            node,
            uid,
            lambda: fleet.desired(node),
            instance=fleet.instance,
        )
        self.fleet = fleet

    def existing(self) -> list[Any]:
        return self.fleet.cache.existing(self.node_name)
