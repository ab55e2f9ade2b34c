"""Idle-GPU lending with reclaim (ours; docs/sharing.md): a GPU whose owners are idle is also
offered to "spot" claims through a second device, its lend view `gpu-<minor>-spot`, and taken back
through Kubernetes' own NoExecute device-taint eviction the moment an owner gets busy. Pure: the
lend views an inventory gains, and the state machine that turns samples of owner utilization into
the lend views' taints.

- A lend view is its GPU for prepare (same UUID, device node, nvidia-smi facts), published with
  `type: spot` (so NVIDIA's classes never select it) and `dra-fake.dev/lender: gpu-<minor>`.
- Every lend view carries `dra-fake.dev/spot=true:NoSchedule` (the opt-in: spot claims tolerate it)
  and, whenever its GPU may not be lent, `dra-fake.dev/not-lendable=<reason>`: `busy` and
  `unowned` with NoExecute (reclaim: kube-controller-manager evicts the spot pods), `unknown` with
  NoSchedule (after a start: nothing lent, nothing evicted).
- The owners never hold the lend view, so a reclaim never touches them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dra_fake.core.claims import Toleration
from dra_fake.gpu.devices import AllocatableDevice
from dra_fake.gpu.faults import rfc3339
from dra_fake.gpu.inventory import Inventory
from dra_fake.gpu.profiles import format_validation_error

SPOT_SUFFIX = "-spot"
SPOT_TYPE = "spot"
LENDER_ATTRIBUTE = "dra-fake.dev/lender"
SPOT_TAINT = "dra-fake.dev/spot"
NOT_LENDABLE_TAINT = "dra-fake.dev/not-lendable"
LENDABLE, BUSY, UNOWNED, UNKNOWN = "lendable", "busy", "unowned", "unknown"
STATES = (LENDABLE, BUSY, UNOWNED, UNKNOWN)
EFFECT = {BUSY: "NoExecute", UNOWNED: "NoExecute", UNKNOWN: "NoSchedule"}
DEFAULT_THRESHOLD = 10  # percent
DEFAULT_IDLE_FOR = 60.0  # seconds
# Why a GPU in each state is not lent, as a refused prepare names it.
WHY_NOT = {
    BUSY: "its owners are busy",
    UNOWNED: "no claim is prepared on it",
    UNKNOWN: "its owners have not been seen idle since the plugin started",
}


class LendingSettingError(ValueError):
    """A lending flag out of range; the message names it."""


class LendingStateError(ValueError):
    """A saved lending state that cannot be restored; the message names the field."""


@dataclass(frozen=True)
class LendingSettings:
    """--gpu-lending-idle-threshold (percent: an owner below it is idle) and --gpu-lending-idle-for
    (seconds every sample must be idle before the GPU is lent again)."""

    threshold: int = DEFAULT_THRESHOLD
    idle_for: float = DEFAULT_IDLE_FOR

    def __post_init__(self) -> None:
        if not 1 <= self.threshold <= 100:
            raise LendingSettingError(
                f"--gpu-lending-idle-threshold: {self.threshold} is not a percentage from 1 to 100"
            )
        if self.idle_for < 0:
            raise LendingSettingError(f"--gpu-lending-idle-for: {self.idle_for} is negative")


def spot_name(gpu_name: str) -> str:
    return f"{gpu_name}{SPOT_SUFFIX}"


def with_lend_views(inventory: Inventory) -> Inventory:
    """The inventory with a lend view beside each full GPU of a `mig: none` group (MIG devices and
    dynamic-MIG GPUs are not lent). A lend view is exclusive: one spot claim per GPU."""
    views = {}
    for gpu in inventory.gpus:
        device = inventory.devices.get(gpu.name)
        if gpu.mig_mode != "none" or device is None:
            continue
        name = spot_name(gpu.name)
        views[name] = dataclasses.replace(device, name=name, shares=None, lends=gpu.name)
    return dataclasses.replace(inventory, devices={**inventory.devices, **views})


@dataclass(frozen=True)
class Owners:
    """What one sample says about a GPU's owners (the claims prepared on the GPU itself)."""

    owned: bool
    utilization: int  # percent, the owners' pods together (spot pods are not counted)


# A kept time (Unix seconds): one a taint's timeAdded can show (up to the year 9999).
Seconds = Annotated[float, Field(ge=0, le=253_402_300_799, allow_inf_nan=False)]


class _Gpu(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    state: str = UNKNOWN  # one of STATES
    since: Seconds = 0.0  # when the state began (the taint's timeAdded)
    idle_since: Seconds | None = Field(default=None, alias="idleSince")  # first of an unbroken idle run

    @field_validator("state")
    @classmethod
    def _known(cls, state: str) -> str:
        if state not in STATES:
            raise ValueError(f"{state!r} is not one of {', '.join(STATES)}")
        return state


class _Saved(BaseModel):
    """What a plugin keeps of its lending state across restarts (`Lending.saved`)."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1]
    started: Seconds  # the spot taint's timeAdded
    sampled: Seconds | None  # the last sample observed
    gpus: dict[str, _Gpu]


@dataclass
class Lending:
    """Each lendable GPU's state, moved by samples (`observe`); `taints` is what its lend view
    carries now; `saved` and `restored` carry it through a plugin restart."""

    settings: LendingSettings
    started: float
    _gpus: dict[str, _Gpu] = field(default_factory=dict)
    sampled: float | None = None  # when the last sample was observed

    def saved(self) -> dict[str, Any]:
        """The state as JSON, for `restored` in the next process of the plugin."""
        gpus = {name: gpu.model_dump(by_alias=True) for name, gpu in sorted(self._gpus.items())}
        return {"version": 1, "started": self.started, "sampled": self.sampled, "gpus": gpus}

    @classmethod
    def restored(cls, settings: LendingSettings, now: float, saved: object, source: str) -> Lending:
        """The state an earlier process saved (`saved`), restarted at `now`: each GPU's state and
        its taint's timeAdded as they were, so a restart neither evicts spot pods nor lends a GPU
        it had reclaimed; an idle run goes on from where it stopped, the time nobody sampled not
        counted (an owner may have been busy meanwhile). LendingStateError naming the field."""
        try:
            kept = _Saved.model_validate(saved)
        except ValidationError as error:
            raise LendingStateError(format_validation_error(source, error)) from None
        if kept.sampled is None:  # never sampled: no idle run to go on with
            return cls(settings, kept.started, dict(kept.gpus))
        paused = max(0.0, now - kept.sampled)
        for gpu in kept.gpus.values():
            if gpu.idle_since is not None:
                gpu.idle_since += paused
        return cls(settings, kept.started, dict(kept.gpus), now)  # paused until now

    def state(self, gpu: str) -> str:
        return self._gpu(gpu).state

    def states(self) -> dict[str, str]:
        return {name: gpu.state for name, gpu in sorted(self._gpus.items())}

    def _gpu(self, gpu: str) -> _Gpu:
        return self._gpus.setdefault(gpu, _Gpu(since=self.started))

    def observe(self, now: float, owners: Mapping[str, Owners]) -> dict[str, tuple[str, str]]:
        """One sample of each GPU's owners; returns the GPUs whose state changed: name -> (old, new).

        Busy (an owner at or above the threshold) reclaims at once; no owner is `unowned`; an owned
        GPU becomes lendable only after `idle_for` of idle samples, from any state, so a GPU that
        was just reclaimed is not lent again at the next idle sample (hysteresis)."""
        changed = {}
        self.sampled = now
        for name, seen in owners.items():
            gpu = self._gpu(name)
            if not seen.owned:
                new, gpu.idle_since = UNOWNED, None
            elif seen.utilization >= self.settings.threshold:
                new, gpu.idle_since = BUSY, None
            else:
                if gpu.idle_since is None:
                    gpu.idle_since = now
                if now - gpu.idle_since >= self.settings.idle_for:
                    new = LENDABLE
                else:  # idle, not yet for long enough: a newly owned GPU is busy until then
                    new = BUSY if gpu.state == UNOWNED else gpu.state
            if new != gpu.state:
                changed[name] = (gpu.state, new)
                gpu.state, gpu.since = new, now
        return changed

    def taints(self, gpus: list[str]) -> dict[str, list[dict[str, str]]]:
        """Lend view name -> its taints (as in a ResourceSlice, timeAdded set here: the publisher
        compares what it sends with what the server keeps)."""
        out = {}
        for name in gpus:
            gpu = self._gpu(name)
            spot = {
                "key": SPOT_TAINT,
                "value": "true",
                "effect": "NoSchedule",
                "timeAdded": rfc3339(self.started),
            }
            taints = [spot]
            if gpu.state != LENDABLE:
                taints.append(
                    {
                        "key": NOT_LENDABLE_TAINT,
                        "value": gpu.state,
                        "effect": EFFECT[gpu.state],
                        "timeAdded": rfc3339(gpu.since),
                    }
                )
            out[spot_name(name)] = taints
        return out


def event(gpu: str, new: str, owners: Owners, settings: LendingSettings) -> tuple[str, str] | None:
    """The Node event (reason, message) of a GPU's move into `new` (None: none, e.g. `unknown`)."""
    threshold = settings.threshold
    if new == LENDABLE:
        idle = f"{owners.utilization}% < {threshold}%"
        return "GpuLendable", f"{gpu} lendable: owners idle ({idle}) for {settings.idle_for:g}s"
    if new == BUSY:
        return "GpuReclaimed", f"{gpu} reclaimed: owners at {owners.utilization}% (>= {threshold}%)"
    if new == UNOWNED:
        return "GpuNotLendable", f"{gpu} not lendable: no claim is prepared on it"
    return None


def not_lendable(taints: list[dict[str, str]]) -> str | None:
    """The state a lend view's taints say its GPU is in when it may not be lent; None: lendable."""
    return next((t.get("value", UNKNOWN) for t in taints if t.get("key") == NOT_LENDABLE_TAINT), None)


def refusal(view: str, gpu: str, state: str) -> str:
    """Why a spot claim on `view` is not prepared (the kubelet retries; the scheduler allocated it
    from an older slice, or the claim tolerates the taint), in NVIDIA's wording of a prepare error."""
    why = WHY_NOT.get(state, "its state is not known")
    return (
        f"prepare devices failed: requested device {view} is not lendable now: GPU {gpu} is {state} "
        f"({NOT_LENDABLE_TAINT}={state}: {why})"
    )


def tolerated_forever(tolerations: Sequence[Toleration]) -> str | None:
    """The reclaim state (`busy`, `unowned`) whose NoExecute taint a spot result tolerates without
    tolerationSeconds: kube-controller-manager would never evict it, so it could never be
    reclaimed. Kubernetes' matching: an empty key or effect tolerates every key or effect."""
    forever = [t for t in tolerations if t.seconds is None]
    return next(
        (s for s in (BUSY, UNOWNED) if any(t.tolerates(NOT_LENDABLE_TAINT, s, EFFECT[s]) for t in forever)),
        None,
    )


def unreclaimable(view: str, state: str) -> str:
    """Why a spot claim that tolerates a reclaim forever is not prepared (permanent: the claim)."""
    return (
        f"prepare devices failed: requested device {view}: the spot claim tolerates "
        f"{NOT_LENDABLE_TAINT}={state}:NoExecute forever, so it could never be reclaimed "
        "(give that toleration tolerationSeconds)"
    )


def lending_off(view: str, gpu: str) -> str:
    """Why a spot claim is not prepared where lending is off (the lend view is not published)."""
    return (
        f"prepare devices failed: requested device is not allocatable: {view} "
        f"(the lend view of {gpu}: idle-GPU lending is off on this node, --gpu-lending=false)"
    )


def lent_gpus(devices: Mapping[str, AllocatableDevice]) -> list[str]:
    """The GPUs with a lend view, by name."""
    return sorted(d.lends for d in devices.values() if d.lends is not None)
