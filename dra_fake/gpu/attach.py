"""Fabric-attached GPUs (composable or network-attached hardware): devices the scheduler may bind a
pod to only after an attach reports success (Kubernetes' DRADeviceBindingConditions; facts in
docs/reference/kubernetes-dra.md#binding-conditions).

Pure: the inventory's `attach` setting, what the slice publishes for such a device, and the
outcome of one simulated attach. The service that watches claims and writes the outcome into
their status is dra_fake.gpu.services.attach.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from pydantic import Field

from dra_fake.core.claimstatus import Condition
from dra_fake.gpu.profiles.models import StrictModel

# The condition types our devices publish (valid condition types: a name, optionally qualified).
ATTACHED = "gpu.nvidia.com/attached"
ATTACH_FAILED = "gpu.nvidia.com/attach-failed"
# Fields the API server drops unless DRADeviceBindingConditions and DRAResourceClaimDeviceStatus
# are on (alpha in 1.34 and 1.35, beta and on by default from 1.36).
FIELDS_SINCE = (1, 34)

Outcome = Literal["attached", "failed", "none"]
OUTCOMES: tuple[Outcome, ...] = ("none", "failed", "attached")  # a claim's outcome: the first of its devices'
# A claim (or its template's claims) may ask for an outcome, whatever the GPUs' attach says: a
# scenario's attach failures (docs/scenarios.md). A value outside OUTCOMES is ignored with a warning.
ANNOTATION_OUTCOME = "dra-fake.dev/attach-outcome"


class AttachConfig(StrictModel):
    """An inventory group's `attach`: its GPUs are fabric-attached."""

    delay_seconds: Annotated[float, Field(ge=0, le=3600)] = 2.0  # from allocation to the outcome
    failure_rate: Annotated[float, Field(ge=0, le=1)] = 0.0  # fraction of attempts that fail
    fail_first: Annotated[int, Field(ge=0, le=100)] = 0  # the first N attempts of each claim fail
    # never report an outcome: the scheduler gives up at its bindingTimeout (the timeout path)
    hang: bool = False


def slice_fields() -> dict[str, Any]:
    """What a fabric-attached device adds to its ResourceSlice entry."""
    return {"bindsToNode": True, "bindingConditions": [ATTACHED], "bindingFailureConditions": [ATTACH_FAILED]}


def has_binding_conditions(result: dict[str, Any]) -> bool:
    """Whether an allocation result (status.allocation.devices.results[]) waits for an attach."""
    return bool(result.get("bindingConditions"))


def outcome(config: AttachConfig, claim_uid: str, attempt: int) -> Outcome:
    """The outcome of attempt `attempt` (1, 2, ...) for a claim: deterministic for a claim UID and
    attempt, so a rerun of the same scenario fails the same attempts."""
    if config.hang:
        return "none"
    if attempt <= config.fail_first:
        return "failed"
    if config.failure_rate <= 0:
        return "attached"
    digest = hashlib.sha256(f"{claim_uid}/{attempt}".encode()).digest()
    draw = int.from_bytes(digest[:8], "big") / 2**64
    return "failed" if draw < config.failure_rate else "attached"


def conditions(result: Outcome, node: str, attempt: int) -> list[Condition]:
    """The device's binding conditions after an attach (none: nothing is written)."""
    if result == "attached":
        return [
            Condition(ATTACHED, "True", "Attached", f"attached to {node} (attempt {attempt})"),
            Condition(ATTACH_FAILED, "False", "Attached", ""),
        ]
    if result == "failed":
        return [
            Condition(ATTACHED, "False", "AttachFailed", ""),
            Condition(
                ATTACH_FAILED, "True", "AttachFailed", f"fabric attach to {node} failed (attempt {attempt})"
            ),
        ]
    return []
