"""dra-fake's NVML library through nvidia-ml-py (docs/nvml.md): MIG: the H200's GPU instance profiles,
the MIG devices of a MIG-mode GPU, and the GPU and compute instances behind them (tests/nvmlbed.py)."""

from __future__ import annotations

import ctypes
import json
from typing import Any

import pynvml as N

from tests.nvmlbed import DATA, MIB, MIG_GPU_UUID, MIG_UUIDS, code, plain, raw

# ---- MIG ---------------------------------------------------------------------------------------------


def profiles_of_the_h200() -> dict[str, Any]:
    """tests/data/nvml/nvml-h200-580.txt: GPU-instance profile info by profile index."""
    text = (DATA / "nvml-h200-580.txt").read_text()
    profiles: dict[str, Any] = json.loads(text.split("\n", 1)[1].rsplit("rc=", 1)[0])["gi_profiles"]
    return profiles


def test_gpu_instance_profiles_match_the_h200(nvml: Any) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)  # MIG disabled: NVIDIA lists the profiles anyway
    for index, want in profiles_of_the_h200().items():
        if isinstance(want, str):
            assert code(lambda i=int(index): N.nvmlDeviceGetGpuInstanceProfileInfo(h, i)) == 3, index
            continue
        got = plain(N.nvmlDeviceGetGpuInstanceProfileInfo(h, int(index)))  # nvmlGpuInstanceProfileInfo_v2
        assert got == {k: v for k, v in want.items() if k != "placements_err"} | {"version": got["version"]}
        v1 = plain(N.nvmlDeviceGetGpuInstanceProfileInfo(h, int(index), version=1))
        assert v1 == {k: v for k, v in got.items() if k not in ("version", "name")}
    assert code(lambda: N.nvmlDeviceGetGpuInstanceProfileInfo(h, 0x12)) == N.NVML_ERROR_INVALID_ARGUMENT
    assert N.nvmlDeviceGetGpuInstanceProfileInfoById(h, 20).name == "MIG 1g.18gb+me"
    # the third version (no isP2pSupported; capabilities after the name): 152 bytes, by offset
    v3 = (ctypes.c_uint * 38)()
    v3[0] = 0x03000098
    assert raw("nvmlDeviceGetGpuInstanceProfileInfoV", h, 7, ctypes.byref(v3)) == 0
    assert (v3[1], v3[2], v3[3], v3[4], v3[9]) == (20, 1, 1, 16, 1)  # id, slices, instances, SMs, OFA
    assert bytes(v3)[48:62] == b"MIG 1g.18gb+me" and v3[36] == 0  # name; capabilities
    v3[0] = 0x04000098
    assert raw("nvmlDeviceGetGpuInstanceProfileInfoV", h, 7, ctypes.byref(v3)) == 25  # version mismatch
    # placements, as nvidia-smi mig -lgipp prints them
    for profile_id, want_places in (
        (19, [(s, 1) for s in range(7)]),
        (14, [(0, 2), (2, 2), (4, 2)]),
        (0, [(0, 8)]),
    ):
        count = ctypes.c_uint(0)
        assert (
            raw("nvmlDeviceGetGpuInstancePossiblePlacements_v2", h, profile_id, None, ctypes.byref(count))
            == 0
        )
        assert count.value == len(want_places)
        places = (N.c_nvmlGpuInstancePlacement_t * count.value)()
        short = ctypes.c_uint(count.value - 1)
        rc = raw("nvmlDeviceGetGpuInstancePossiblePlacements_v2", h, profile_id, places, ctypes.byref(short))
        assert rc == N.NVML_ERROR_INSUFFICIENT_SIZE
        N.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, places, ctypes.byref(count))
        assert [(p.start, p.size) for p in places] == want_places
    assert code(lambda: N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 1234)) == N.NVML_ERROR_INVALID_ARGUMENT
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) == 7


def test_mig_devices_of_a_mig_mode_gpu(nvml: Any) -> None:
    gpu0 = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetMaxMigDeviceCount(gpu0) == 0
    assert code(lambda: N.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0)) == N.NVML_ERROR_NOT_FOUND
    gpu = N.nvmlDeviceGetHandleByIndex(1)
    assert N.nvmlDeviceGetMigMode(gpu) == [1, 1]
    assert N.nvmlDeviceGetMaxMigDeviceCount(gpu) == 7
    assert code(lambda: N.nvmlDeviceGetUtilizationRates(gpu)) == N.NVML_ERROR_NOT_SUPPORTED
    assert code(lambda: N.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 2)) == N.NVML_ERROR_NOT_FOUND
    assert code(lambda: N.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 7)) == N.NVML_ERROR_INVALID_ARGUMENT
    migs = [N.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i) for i in range(2)]
    for i, mig in enumerate(migs):
        assert N.nvmlDeviceIsMigDeviceHandle(mig).value == 1
        assert N.nvmlDeviceGetUUID(mig) == MIG_UUIDS[i]
        assert N.nvmlDeviceGetName(mig) == "NVIDIA H200 MIG 1g.18gb"
        assert N.nvmlDeviceGetGpuInstanceId(mig) == 7 + i
        assert N.nvmlDeviceGetComputeInstanceId(mig) == 0
        parent = N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        assert N.nvmlDeviceGetUUID(parent) == MIG_GPU_UUID
        attrs = N.nvmlDeviceGetAttributes(mig)
        assert (attrs.multiprocessorCount, attrs.sharedCopyEngineCount, attrs.sharedDecoderCount) == (
            16,
            1,
            1,
        )
        assert (attrs.sharedJpegCount, attrs.gpuInstanceSliceCount, attrs.memorySizeMB) == (1, 1, 16384)
        assert N.nvmlDeviceGetComputeRunningProcesses(mig) == []
        assert N.nvmlDeviceGetBAR1MemoryInfo(mig).bar1Total == 32768 * MIB
        assert (
            code(lambda mig=mig: N.nvmlDeviceGetMigDeviceHandleByIndex(mig, 0))
            == N.NVML_ERROR_INVALID_ARGUMENT
        )
        assert code(lambda mig=mig: N.nvmlDeviceGetTemperature(mig, 0)) == N.NVML_ERROR_NOT_SUPPORTED
    assert N.nvmlDeviceIsMigDeviceHandle(gpu).value == 0
    assert code(lambda: N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu)) == N.NVML_ERROR_INVALID_ARGUMENT
    # a MIG device's memory is its GPU instance's, and its own live usage
    mem = N.nvmlDeviceGetMemoryInfo(migs[0])
    assert (mem.total, mem.used, mem.free) == (16384 * MIB, 1024 * MIB, 15360 * MIB)
    assert N.nvmlDeviceGetMemoryInfo(migs[1]).used == 0
    assert N.nvmlDeviceGetMemoryInfo(gpu).used == (615 + 2048) * MIB + 64 * 1024  # the reserve: docs/nvml.md


def test_gpu_and_compute_instances_behind_the_mig_devices(nvml: Any) -> None:
    gpu = N.nvmlDeviceGetHandleByIndex(1)
    gis = (N.c_nvmlGpuInstance_t * 7)()
    count = ctypes.c_uint(0)
    N.nvmlDeviceGetGpuInstances(gpu, 19, gis, ctypes.byref(count))
    assert count.value == 2
    infos = [N.nvmlGpuInstanceGetInfo(gis[i]) for i in range(2)]
    assert [(i.id, i.profileId, i.placement.start, i.placement.size) for i in infos] == [
        (7, 19, 0, 1),
        (8, 19, 1, 1),
    ]
    assert N.nvmlDeviceGetUUID(infos[0].device) == MIG_GPU_UUID
    N.nvmlDeviceGetGpuInstances(gpu, 14, gis, ctypes.byref(count))
    assert count.value == 0
    gi = N.nvmlDeviceGetGpuInstanceById(gpu, 8)
    assert N.nvmlGpuInstanceGetInfo(gi).id == 8
    assert code(lambda: N.nvmlDeviceGetGpuInstanceById(gpu, 9)) == N.NVML_ERROR_NOT_FOUND
    # two 1-slice instances taken: 5 of 7 left, the 2-slice profile fits twice (at 2 and 4)
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, 19) == 5
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, 14) == 2
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, 0) == 0
    ci_profile = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0
    )
    assert (ci_profile.sliceCount, ci_profile.multiprocessorCount, ci_profile.name) == (1, 16, "MIG 1g.18gb")
    two = N.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE
    assert (
        code(lambda: N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, two, 0)) == N.NVML_ERROR_NOT_SUPPORTED
    )
    cis = (N.c_nvmlComputeInstance_t * 1)()
    N.nvmlGpuInstanceGetComputeInstances(
        gi, N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, cis, ctypes.byref(count)
    )
    assert count.value == 1
    ci = N.nvmlComputeInstanceGetInfo(cis[0])
    assert (ci.id, ci.profileId, ci.placement.size) == (0, 0, 1)
    assert N.nvmlGpuInstanceGetInfo(ci.gpuInstance).id == 8
    assert N.nvmlComputeInstanceGetInfo(N.nvmlGpuInstanceGetComputeInstanceById(gi, 0)).id == 0
    # MIG disabled: no GPU instances
    gpu0 = N.nvmlDeviceGetHandleByIndex(0)
    assert code(lambda: N.nvmlDeviceGetGpuInstances(gpu0, 19, gis, ctypes.byref(count))) == 3
