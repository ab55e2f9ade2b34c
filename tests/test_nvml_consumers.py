"""The NVML consumers of e2e/test_nvml.py (e2e/nvmlview.py) on files: the probe, gpustat, nvitop and
the go-nvml program run against dra-fake's library on the device and live files of
tests/nvmlbed.py (an H200, an H200 in MIG mode with two MIG devices, a lost GPU), each parsed
into the view the e2e tests compare with the metrics. Pins the parsers to what the pinned tools
print, and the comparison to the values that differ."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from e2e.nvmlview import CONSUMERS, PARSERS, GpuView, MetricsGpu, differences, on_host
from tests.nvmlbed import H200_LIVE, H200_UUID, MIG_GPU_UUID, MIG_UUIDS, Bed

# the H200's readings as the node's metrics serve them (the live file below)
METRICS = MetricsGpu(
    H200_UUID,
    "00000000:00:06.0",
    {
        "DCGM_FI_DEV_GPU_UTIL": 75,
        "DCGM_FI_DEV_FB_USED": 10240,
        "DCGM_FI_DEV_FB_FREE": 143771 - 616 - 10240,
        "DCGM_FI_DEV_FB_RESERVED": 616,
        "DCGM_FI_DEV_GPU_TEMP": 33,
        "DCGM_FI_DEV_POWER_USAGE": 77.447312,  # the live file has two decimals
    },
)


def views(consumer: str, lib: Path, files: Bed) -> list[GpuView]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(files.root), "DRA_FAKE_ROOT": str(files.root)}
    env["LD_LIBRARY_PATH"] = str(lib.parent)
    out = subprocess.run(on_host(consumer), env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return PARSERS[consumer](out.stdout + out.stderr)


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_each_consumer_prints_the_files_values(consumer: str, lib_path: Path, bed: Bed) -> None:
    bed.set_live(H200_UUID, H200_LIVE | {"utilization": 75, "memory_used": 10240, "power_draw": "77.45"})
    if consumer == "gonvml":  # it stops at a lost GPU (e2e/test_nvml.py checks how)
        (bed.devices / "00000000-3B-00.0_gpu").unlink()
    h200, mig_gpu, *lost = views(consumer, lib_path, bed)
    assert differences(h200, METRICS) == []
    assert h200.uuid in (H200_UUID, None) and h200.bus_id in ("00000000:00:06.0", None)
    assert h200.memory_total_mib in (143771, None) and h200.memory_used_mib in (10240, None)
    # a sample of other values: each printed value is compared
    other = MetricsGpu(H200_UUID, METRICS.bus_id, METRICS.values | {"DCGM_FI_DEV_GPU_UTIL": 74})
    other.values["DCGM_FI_DEV_POWER_USAGE"] = 80.0
    assert differences(h200, other) == [
        "utilization (%): printed 75, metrics 74",
        f"power (W): printed {h200.power_w}, metrics 80.0",
    ]
    # the MIG-mode GPU: no utilization, its MIG devices (gpustat lists physical GPUs only)
    assert mig_gpu.uuid in (MIG_GPU_UUID, None) and mig_gpu.utilization is None
    if consumer != "gpustat":
        first, second = mig_gpu.migs
        assert (first.gi, first.ci, first.profile, first.memory_total_mib) == (7, 0, "1g.18gb", 16384)
        assert first.uuid in (MIG_UUIDS[0], None) and first.memory_used_mib in (1024, None)
        assert (second.gi, second.uuid) == (8, MIG_UUIDS[1] if first.uuid else None)
    assert [v.lost for v in lost] == ([] if consumer == "gonvml" else [True])
