"""What the checkpoint records per `gpu.nvidia.com` claim: the driver's payload (`GpuClaimData`)
of dra_fake.core.checkpoint's entries, to undo a claim's preparation."""

from __future__ import annotations

from pydantic import Field

from dra_fake.core.checkpoint import ClaimEntry, DriverData, _Model


class MigDeviceRecord(_Model):
    """A dynamic MIG device created for the claim (destroyed on unprepare / rollback)."""

    device: str
    uuid: str
    parentUUID: str
    gpuIndex: int
    profile: str
    giProfileID: int
    placementStart: int
    placementSize: int


class TimeSliceRecord(_Model):
    """A time-slice interval applied to a full GPU (reset to Default on undo)."""

    uuid: str
    interval: str


class MpsDaemonRecord(_Model):
    """A (simulated) MPS control daemon started for a group of the claim's devices."""

    controlDaemonID: str
    uuids: list[str]


class ShareRecord(_Model):
    """The claim's share of a device with consumable shares
    (docs/sharing-design.md#14-state-and-checkpoint-keyed-by-share)."""

    device: str
    shareID: str | None = None  # None: allocated whole before the device was shared
    config: str | None = None  # the normalized config (configresolve.fingerprint); None: unknown (recovered)
    consumedCapacity: dict[str, str] = Field(default_factory=dict)  # as the allocation result has it


class GpuClaimData(DriverData):
    """The undo data of a gpu.nvidia.com claim (format 1 kept it as `undo`, same field names).
    A dynamic MIG device or a time slice several shares hold is recorded by each of them and
    released when the last goes (`DeviceState.release`)."""

    migDevices: list[MigDeviceRecord] = Field(default_factory=list)
    timeSlicing: list[TimeSliceRecord] = Field(default_factory=list)
    mpsDaemons: list[MpsDaemonRecord] = Field(default_factory=list)
    shares: list[ShareRecord] = Field(default_factory=list)  # empty in checkpoints of older versions


GpuClaimEntry = ClaimEntry[GpuClaimData]
