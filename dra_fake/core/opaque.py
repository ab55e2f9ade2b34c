"""Opaque device configs of a claim, for any driver: which entries are the driver's, in which
order they apply, and which one applies to a request. Decoding the parameters is the driver's.

Precedence as NVIDIA's drivers (GetOpaqueDeviceConfigs): every entry's source must be FromClass
or FromClaim; class configs come first, then claim configs, each in list order; the last entry
whose `requests` match (empty: all requests; a main request covers its subrequests) applies.
Entries of other drivers are skipped; an entry without `opaque` is refused. docs/prepare.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from dra_fake.core.claims import one_line

SOURCE_FROM_CLASS = "FromClass"
SOURCE_FROM_CLAIM = "FromClaim"

C = TypeVar("C")


class OpaqueConfigError(ValueError):
    """A config entry the driver cannot use; the message follows NVIDIA's wording, on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


@dataclass(frozen=True)
class ClaimConfig(Generic[C]):
    """One decoded config entry of this driver, in precedence order (later wins)."""

    source: str
    requests: tuple[str, ...]
    config: C
    position: int


def main_request(request: str) -> str:
    """`main/sub` -> `main` (kubelet request names never carry the subrequest)."""
    return request.split("/", 1)[0]


def requests_match(config_requests: Sequence[str], request: str) -> bool:
    """Empty = all requests; a main request name also covers its subrequests."""
    return not config_requests or request in config_requests or main_request(request) in config_requests


def decode_claim_configs(
    driver: str,
    entries: Sequence[Mapping[str, object]],
    decode: Callable[[object], C],
    error: type[OpaqueConfigError] = OpaqueConfigError,
) -> list[ClaimConfig[C]]:
    """`status.allocation.devices.config[]` -> this driver's configs: FromClass first, then
    FromClaim, each in list order; `decode` turns the parameters into the driver's config."""
    by_source: dict[str, list[tuple[tuple[str, ...], C]]] = {SOURCE_FROM_CLASS: [], SOURCE_FROM_CLAIM: []}
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise error(f"invalid config entry {index}: expected an object")
        source = entry.get("source")
        if not isinstance(source, str) or source not in by_source:
            raise error(f"invalid config source: {source}")
        opaque = entry.get("opaque")
        if not isinstance(opaque, dict):
            raise error("only opaque parameters are supported by this driver")
        if opaque.get("driver") != driver:
            continue
        requests = entry.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise error(f"invalid config requests: {requests!r}")
        by_source[str(source)].append((tuple(requests), decode(opaque.get("parameters"))))
    class_count = len(by_source[SOURCE_FROM_CLASS])
    ordered = by_source[SOURCE_FROM_CLASS] + by_source[SOURCE_FROM_CLAIM]
    return [
        ClaimConfig(
            source=SOURCE_FROM_CLASS if i < class_count else SOURCE_FROM_CLAIM,
            requests=requests,
            config=config,
            position=i,
        )
        for i, (requests, config) in enumerate(ordered)
    ]


def select_config(configs: Sequence[ClaimConfig[C]], request: str) -> ClaimConfig[C] | None:
    """The config that applies to an allocation result's request: the last matching one."""
    for config in reversed(configs):
        if requests_match(config.requests, request):
            return config
    return None
