"""A ResourceClaim as a kubelet plugin sees it: the parts prepare reads, and the errors a claim's
preparation can end in (the kubelet retries a ClaimError; a PermanentClaimError cannot succeed
on retry, but the kubelet is told the same way). Works on v1, v1beta2 and v1beta1 JSON: the
allocation results have the same shape in all three."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def one_line(text: str) -> str:
    """`text` with every non-printable character escaped (`\\n`, `\\x1e`): a claim's error quotes
    user input (config keys, strategies), and it must stay one line in the kubelet's events and
    our logs."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class ClaimError(Exception):
    """Preparing or unpreparing one claim failed; the kubelet retries later."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class ClaimNotFound(ClaimError):
    """The API server has no such ResourceClaim."""


class ClaimUnreadable(ClaimError):
    """The API server answered the claim's GET with an error (other than not found)."""


class PermanentClaimError(ClaimError):
    """The claim itself is unusable (not allocated, bad config, unknown device): retrying the same
    claim cannot succeed."""


@dataclass(frozen=True)
class Toleration:
    """One `results[].tolerations[]` entry (copied from the request by the allocator from 1.35)."""

    key: str = ""  # empty: every key (operator Exists)
    operator: str = "Equal"
    value: str = ""
    effect: str = ""  # empty: every effect
    seconds: int | None = None  # tolerationSeconds; None: forever

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        """Kubernetes' taint matching (resourceclaim.ToleratesTaint, as for node taints)."""
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        return self.operator == "Exists" or self.value == value


@dataclass(frozen=True)
class AllocationResult:
    """One `status.allocation.devices.results[]` entry of this driver."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool
    share_id: str | None
    # Consumable capacity: what this share consumes of each capacity of the device, as the
    # scheduler rounded it (quantities as written, e.g. {"memory": "19074Mi", "shares": "1"});
    # empty for a device allocated whole.
    consumed_capacity: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True)
class ParsedClaim:
    uid: str
    name: str
    namespace: str
    results: tuple[AllocationResult, ...]  # this driver's only
    config: tuple[Mapping[str, object], ...]  # status.allocation.devices.config, all drivers'


def _str_field(obj: Mapping[str, Any], key: str, what: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise PermanentClaimError(f"invalid claim: {what} has no {key}")
    return value


def _object(value: Any, what: str) -> Mapping[str, Any]:
    """A JSON object, or {} when absent. The API server validates claims, so a wrong shape means
    a server or client we do not know; it fails this claim, naming the field."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PermanentClaimError(f"invalid claim: {what} is not an object")
    return value


def _array(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PermanentClaimError(f"invalid claim: {what} is not an array")
    return value


def _tolerations(value: Any, what: str) -> tuple[Toleration, ...]:
    out = []
    for index, item in enumerate(_array(value, what)):
        raw = _object(item, f"{what}[{index}]")
        strings = {}
        for name in ("key", "operator", "value", "effect"):
            found = raw.get(name, "")
            if not isinstance(found, str):
                raise PermanentClaimError(f"invalid claim: {what}[{index}].{name} is not a string")
            strings[name] = found
        seconds = raw.get("tolerationSeconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            raise PermanentClaimError(f"invalid claim: {what}[{index}].tolerationSeconds is not an integer")
        out.append(
            Toleration(
                strings["key"], strings["operator"] or "Equal", strings["value"], strings["effect"], seconds
            )
        )
    return tuple(out)


def parse_claim(claim: Mapping[str, Any], driver: str) -> ParsedClaim:
    """The parts of a ResourceClaim (v1, v1beta2 or v1beta1 JSON) that prepare reads."""
    claim = _object(claim, "the claim")
    metadata = _object(claim.get("metadata"), "metadata")
    uid = _str_field(metadata, "uid", "metadata")
    allocation = _object(_object(claim.get("status"), "status").get("allocation"), "status.allocation")
    if not allocation:
        raise PermanentClaimError("claim not yet allocated")
    devices = _object(allocation.get("devices"), "status.allocation.devices")
    results = []
    for index, item in enumerate(_array(devices.get("results"), "status.allocation.devices.results")):
        raw = _object(item, f"status.allocation.devices.results[{index}]")
        if raw.get("driver") != driver:
            continue
        share_id = raw.get("shareID")
        consumed = _object(
            raw.get("consumedCapacity"), f"status.allocation.devices.results[{index}].consumedCapacity"
        )
        for name, amount in consumed.items():
            if isinstance(amount, bool) or not isinstance(amount, str | int):
                raise PermanentClaimError(
                    f"invalid claim: status.allocation.devices.results[{index}].consumedCapacity.{name} "
                    "is not a quantity"
                )
        results.append(
            AllocationResult(
                request=_str_field(raw, "request", "allocation result"),
                driver=driver,
                pool=_str_field(raw, "pool", "allocation result"),
                device=_str_field(raw, "device", "allocation result"),
                admin_access=raw.get("adminAccess") is True,
                share_id=share_id if isinstance(share_id, str) and share_id else None,
                consumed_capacity={str(k): str(v) for k, v in consumed.items()},
                tolerations=_tolerations(
                    raw.get("tolerations"), f"status.allocation.devices.results[{index}].tolerations"
                ),
            )
        )
    return ParsedClaim(
        uid=uid,
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace", "")),
        results=tuple(results),
        config=tuple(_array(devices.get("config"), "status.allocation.devices.config")),
    )
