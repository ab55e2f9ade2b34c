"""What the kubelet-facing gRPC layer needs from a driver, independent of the wire format.

The gRPC servers (v1 and v1beta1 DRAPlugin) translate requests into these types and call a
DriverHandler; the GPU and compute-domain plugins implement DriverHandler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it in NodePrepareResources / NodeUnprepareResources."""

    uid: str
    namespace: str
    name: str


@dataclass(frozen=True)
class PreparedDevice:
    """One prepared device, as returned to the kubelet."""

    request_names: tuple[str, ...]  # main request names (subrequest suffixes stripped)
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None  # v1 only (consumable capacity)


@dataclass
class PrepareResult:
    """Per-claim outcome: devices on success, or a non-empty error (devices then ignored)."""

    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""


def _waiting() -> bool:
    return True


@dataclass(frozen=True)
class CallLimits:
    """How long the kubelet waits for one call: its deadline (time.monotonic() seconds; None: no
    deadline) and whether it still waits (False once it cancelled the call). A driver that retries
    within a call stops at either."""

    deadline: float | None = None
    waiting: Callable[[], bool] = _waiting


NO_LIMITS = CallLimits()


class DriverHandler(Protocol):
    """Implemented by a kubelet plugin. Every requested claim UID must get an entry."""

    def prepare(self, claims: list[ClaimRef], limits: CallLimits = NO_LIMITS) -> dict[str, PrepareResult]: ...

    def unprepare(self, claims: list[ClaimRef], limits: CallLimits = NO_LIMITS) -> dict[str, str]:
        """Claim UID -> error message ("" on success)."""
        ...
