"""Raw-JSON list + watch of one kind of object: the informer loop fleet mode and the GPU plugin's
monitor share. Raw dicts, not the client's typed models: deserialising those costs more than the
HTTP at fleet scale, and the dicts keep the API's camelCase field names.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from kubernetes import client

from dra_fake.core.kube import REQUEST_TIMEOUT, release, request
from dra_fake.core.retry import Backoff

log = logging.getLogger(__name__)

WATCH_SECONDS = 300


def json_body(resp: Any) -> dict[str, Any]:
    """The body of a `_preload_content=False` response; the connection goes back to the pool
    (urllib3 keeps it otherwise, and the next request opens a new TLS connection)."""
    try:
        obj = orjson.loads(resp.data)
    finally:
        release(resp)
    if not isinstance(obj, dict):
        raise TypeError("expected a JSON object")
    return obj


def stream_events(call: Callable[..., Any], **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Raw watch events (JSON dicts; no typed-model deserialisation, which costs more than
    the HTTP at this scale)."""
    read_timeout = float(kwargs.get("timeout_seconds") or WATCH_SECONDS) + 15  # the server ends it first
    resp = call(
        watch=True,
        _preload_content=False,
        allow_watch_bookmarks=True,
        _request_timeout=(REQUEST_TIMEOUT[0], read_timeout),
        **kwargs,
    )
    try:
        rest = b""
        for chunk in resp.stream(65536):
            # One event per line; orjson decodes them ~3x as fast as json (a fleet's watches carry
            # thousands of events a second).
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if line.strip():
                    yield orjson.loads(line)
    finally:
        resp.release_conn()


# The objects' metadata only (name, uid, labels, ...; the API server's PartialObjectMetadata, as
# client-go's metadata informers ask for): a fraction of the bytes to encode, send and decode.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


def lister(api: client.ApiClient, path: str, metadata_only: bool = False) -> Callable[..., Any]:
    """The list/watch call of `path` (`/api/v1/pods`) for run_informer, in the typed client's
    calling convention (`field_selector=`, `watch=`, `_preload_content=`, `_request_timeout=`),
    without the typed client (dra_fake.core.kube.request). `metadata_only`: each object is its
    `metadata` (and kind/apiVersion of meta.k8s.io's PartialObjectMetadata), nothing else."""

    def call(_preload_content: bool = False, _request_timeout: Any = None, **query: Any) -> Any:
        accept = "application/json"
        if metadata_only:
            accept = METADATA_WATCH if query.get("watch") else METADATA_LIST
        return request(api, "GET", path, query=query, timeout=_request_timeout, accept=accept)

    return call


def run_informer(
    stop: threading.Event,
    what: str,
    call: Callable[..., Any],
    kwargs: dict[str, Any],
    on_list: Callable[[list[dict[str, Any]]], None],
    on_event: Callable[[str, dict[str, Any]], None],
) -> None:
    """LIST, then WATCH from the list's resourceVersion, until `stop`; a failure or an expired
    version lists again after a backoff. Runs in the caller's thread."""
    backoff = Backoff()
    rv = ""
    while not stop.is_set():
        try:
            if not rv:
                listed = json_body(call(_preload_content=False, **kwargs))
                rv = listed["metadata"]["resourceVersion"]
                on_list(listed.get("items") or [])
            for event in stream_events(call, resource_version=rv, timeout_seconds=WATCH_SECONDS, **kwargs):
                if stop.is_set():
                    return
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    rv = ""  # expired (410): list again
                    break
                rv = obj["metadata"]["resourceVersion"]
                if kind != "BOOKMARK":
                    on_event(kind, obj)
            backoff.reset()
        except Exception as err:
            log.warning("%s watch failed, listing again", what, extra={"error": str(err)[:300]})
            rv = ""
            stop.wait(backoff.next())
