"""dra-fake's NVML library as a whole (docs/nvml.md): its symbols are NVML's names, the stubs' answers,
the glibc it needs, its soname and static library, and the probe and a go-nvml program run against it
(tests/nvmlbed.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml as N

from tests.nvmlbed import H200_UUID, MIG_UUIDS, REPO, Bed, code

# ---- the library as a whole --------------------------------------------------------------------------


def exported(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


def test_every_nvml_name_is_a_symbol_and_nothing_else_is(lib_path: Path) -> None:
    names = {
        line.strip()
        for line in (REPO / "native/nvml/symbols.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert len(names) > 400
    assert exported(lib_path) == names


def test_stubs_answer_not_supported_or_no_permission(nvml: Any) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert code(lambda: N.nvmlDeviceGetNvLinkState(h, 0)) == N.NVML_ERROR_NOT_SUPPORTED
    assert code(lambda: N.nvmlDeviceGetCpuAffinity(h, 4)) == N.NVML_ERROR_NOT_SUPPORTED
    assert code(lambda: N.nvmlDeviceSetPersistenceMode(h, 0)) == N.NVML_ERROR_NO_PERMISSION
    assert code(lambda: N.nvmlDeviceClearEccErrorCounts(h, 0)) == N.NVML_ERROR_NO_PERMISSION
    assert code(lambda: N.nvmlDeviceCreateGpuInstance(h, 19)) == N.NVML_ERROR_NO_PERMISSION
    assert code(lambda: N.nvmlDeviceResetGpuLockedClocks(h)) == N.NVML_ERROR_NO_PERMISSION


GLIBC = re.compile(r"GLIBC_(\d+)\.(\d+)(?:\.(\d+))?")


def test_the_library_needs_nothing_newer_than_glibc_2_17(lib_path: Path) -> None:
    out = subprocess.run(["objdump", "-T", str(lib_path)], capture_output=True, text=True, check=True).stdout
    versions = {tuple(int(p or 0) for p in m.groups()) for m in GLIBC.finditer(out)}
    assert versions, "objdump shows no glibc symbol versions"
    assert max(versions) <= (2, 17, 0), sorted(versions)
    assert not re.search(r"\b(f?stat|lstat|fstatat|statx)(64)?\b", out)  # GLIBC_2.33 in new glibc
    assert "pthread_" not in out
    check = subprocess.run(
        ["make", "-s", "-C", "native", "check-glibc"], cwd=REPO, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    assert "GLIBC_2.17 (<= 2.17)" in check.stdout


def test_the_soname_and_the_static_library(lib_path: Path) -> None:
    dynamic = subprocess.run(
        ["objdump", "-p", str(lib_path)], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"SONAME\s+libnvidia-ml\.so\.1\b", dynamic)
    assert re.findall(r"NEEDED\s+(\S+)", dynamic) == ["libc.so.6"]
    assert (lib_path.parent / "libdranvml.a").is_file()
    assert (REPO / "dra_fake/gpu/nvidia_smi/native/libnvidia-ml.so.1").read_bytes() == lib_path.read_bytes()


def test_the_probe_runs_cleanly(lib_path: Path, bed: Bed) -> None:
    env = {"PATH": "/usr/bin:/bin", "DRA_FAKE_ROOT": str(bed.root), "NVML_PROBE_LIB": str(lib_path)}
    out = subprocess.run(
        [sys.executable, str(REPO / "hack/nvml/probe.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["init"], result["count"], result["shutdown.third"]) == (
        None,
        3,
        "ERR NVML_ERROR_UNINITIALIZED",
    )
    assert result["devices"][2] == {"handle": "ERR NVML_ERROR_GPU_IS_LOST"}
    for dev in result["devices"][:2]:
        assert set(dev) == {"values", "mig", "lookups", "raw"}
        # only the bindings the probe calls with too few arguments fail to call (as on the real GPU)
        broken = {k: v for k, v in dev["values"].items() if isinstance(v, str) and v.startswith("EXC")}
        assert all("TypeError" in v and "missing" in v for v in broken.values()), broken
    values = result["devices"][0]["values"]
    assert (values["Name"], values["UUID"], values["PowerUsage"]) == ("NVIDIA H200", H200_UUID, 77447)
    assert result["devices"][0]["lookups"]["ByPciBusId.nodomain"] == "same"
    assert result["devices"][0]["mig"] == []
    migs = result["devices"][1]["mig"]
    assert [(m["UUID"], m["Name"], m["GpuInstanceId"], m["IsMigDeviceHandle"]) for m in migs] == [
        (MIG_UUIDS[0], "NVIDIA H200 MIG 1g.18gb", 7, 1),
        (MIG_UUIDS[1], "NVIDIA H200 MIG 1g.18gb", 8, 1),
    ]
    assert migs[0]["MemoryInfo_v2"]["used"] == 1024 << 20
    assert result["events.xid.wait200ms"] == "wait ERR NVML_ERROR_TIMEOUT"


def test_a_go_nvml_program_reads_the_devices(lib_path: Path, bed: Bed, tmp_path: Path) -> None:
    go = shutil.which("go")
    assert go is not None, "go is needed to build hack/nvml/gonvml (a go-nvml consumer)"
    program = tmp_path / "gonvml"
    env = dict(os.environ, CGO_CFLAGS="-Wno-deprecated-declarations", CGO_ENABLED="1")
    build = subprocess.run(
        [go, "build", "-o", str(program), "."],
        cwd=REPO / "hack/nvml/gonvml",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    run_env = {
        "PATH": "/usr/bin:/bin",
        "LD_LIBRARY_PATH": str(lib_path.parent),
        "DRA_FAKE_ROOT": str(bed.root),
    }
    # the lost GPU: go-nvml gets GPU_IS_LOST for its handle, as with NVIDIA's library
    lost = subprocess.run([str(program)], env=run_env, capture_output=True, text=True, timeout=60)
    assert lost.returncode == 1
    assert "DeviceGetHandleByIndex(2): GPU is lost" in lost.stderr
    (bed.devices / "00000000-3B-00.0_gpu").unlink()
    out = subprocess.run([str(program)], env=run_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["driver"], report["nvml"], report["cuda"], report["count"]) == (
        "580.159.04",
        "13.580.159.04",
        13000,
        2,
    )
    h200, mig_gpu = report["devices"]
    assert (h200["name"], h200["uuid"], h200["busId"], h200["powerMilliW"]) == (
        "NVIDIA H200",
        H200_UUID,
        "00000000:00:06.0",
        77447,
    )
    assert "errors" not in h200
    assert mig_gpu["migCurrent"] == 1
    assert mig_gpu["errors"] == {"utilization": "Not Supported"}
    assert [(m["uuid"], m["name"], m["gi"], m["sms"]) for m in mig_gpu["migDevices"]] == [
        (MIG_UUIDS[0], "NVIDIA H200 MIG 1g.18gb", 7, 16),
        (MIG_UUIDS[1], "NVIDIA H200 MIG 1g.18gb", 8, 16),
    ]
