"""The nvidia-smi mounted into pods (dra_fake/gpu/nvidia_smi): CDI mounts, host files, and its output
compared with real nvidia-smi output.

How a test "runs it in a container": tests/smi_container.py (the claim's CDI mounts copied under a
root; the mounted nvidia-smi binary, native/smi, run with DRA_FAKE_ROOT=<root>). The e2e suite does
the same with the mounts the official CDI Go library resolved (e2e/test_cluster.py).

Real output the layout is compared with (public captures, transcribed below; values are theirs):
- REAL_MIG_TABLE / REAL_MIG_LIST: nvidia-smi 580.126.09 on an A100-SXM4-40GB with MIG enabled
  (a public GitHub notes file on MIG setup, Feb 2026, `nvidia-smi -i 0` and `nvidia-smi -L`); the
  `-L` shape is also in NVIDIA's MIG User Guide, "Getting Started with MIG"
  (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/).
- REAL_GPU_TABLE: nvidia-smi 550.90.07, 8 x A100-SXM4-80GB, MIG disabled (a public experiment log);
  the 570/580 GPU table has the same columns.
- REAL_QUERY: `nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv` from a public CUDA
  tutorial; field names and units per `nvidia-smi --help-query-gpu` (nvidia-smi(1) man page,
  https://docs.nvidia.com/deploy/nvidia-smi/).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from smi_container import (
    DRIVER,
    NODE,
    UID1,
    UID2,
    claim,
    container_root,
    make_state,
    mig_names,
    read_spec,
    run_smi,
)

from dra_fake.gpu.monitor import GpuMonitor
from dra_fake.gpu.nvidia_smi import binary_bytes, nvidia_bus_id
from dra_fake.gpu.state import DeviceState

REAL_MIG_TABLE = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.126.09             Driver Version: 580.126.09     CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-40GB          On  |   00000000:10:1C.0 Off |                   On |
| N/A   40C    P0             43W /  400W |     249MiB /  40960MiB |     N/A      Default |
|                                         |                        |              Enabled |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| MIG devices:                                                                            |
+------------------+----------------------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |
|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |
|                  |                                  |        ECC|                       |
|==================+==================================+===========+=======================|
|  0    2   0   0  |             142MiB / 20096MiB    | 56      0 |  4   0    2    0    0 |
|                  |               0MiB / 12211MiB    |           |                       |
+------------------+----------------------------------+-----------+-----------------------+
|  0    9   0   3  |              36MiB /  4864MiB    | 14      0 |  1   0    0    0    0 |
|                  |               0MiB /  3052MiB    |           |                       |
+------------------+----------------------------------+-----------+-----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+
"""

REAL_MIG_LIST = """\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-9e4aeb94-01c0-5173-4811-4ca60f77b3a9)
  MIG 4g.20gb     Device  0: (UUID: MIG-c42101f0-a1fa-5b68-8908-7c5c887f28bd)
  MIG 1c.2g.10gb  Device  1: (UUID: MIG-8970491e-16e0-5140-9f8f-d561baa3c186)
  MIG 1g.5gb      Device  3: (UUID: MIG-20301a31-77fa-59ec-b0b8-7ef543821f29)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-934e3c41-2e9a-efbf-5e75-a17cc8913c9e)
"""

REAL_GPU_TABLE = """\
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:00:05.0 Off |                    0 |
| N/A   30C    P0             65W /  400W |       1MiB /  81920MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA A100-SXM4-80GB          On  |   00000000:00:06.0 Off |                    0 |
"""

REAL_QUERY = "name, compute_cap, memory.total [MiB]\nNVIDIA GeForce RTX 3090, 8.6, 24576 MiB\n"


def skeleton(line: str) -> str:
    """The table structure of a line: borders and rules kept, text blanked."""
    return re.sub(r"[^|+=]", " ", line) if set(line) <= set("+-=|") else re.sub(r"[^|]", " ", line)


def test_table_matches_real_layout_line_by_line(a100: tuple[DeviceState, Any], tmp_path: Path) -> None:
    state, inventory = a100
    state.prepare(claim(UID1, mig_names(inventory)))
    out = run_smi(container_root(tmp_path, [read_spec(state, UID1)])).stdout
    date, *lines = out.splitlines()
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}", date), date
    real = REAL_MIG_TABLE.splitlines()
    # Same number of lines (one GPU, two MIG devices), every line the same width and structure.
    assert len(lines) == len(real), out
    for ours, theirs in zip(lines, real, strict=True):
        assert len(ours) == len(theirs) == 91 or (ours == theirs == ""), (ours, theirs)
        assert skeleton(ours) == skeleton(theirs), f"\nours:  {ours}\nreal:  {theirs}"
    # Identical text where the simulated values equal the capture's (same model, driver, CUDA).
    static = [i for i, line in enumerate(real) if not re.search(r"\d+MiB|\d+C |\| +\d|  0  ", line)]
    for i in static:
        if "Memory-Usage" in real[i] or "BAR1-Usage" in real[i]:
            continue  # 580 prints "Shared ..." for GIs with several CIs; we have one CI per GI
        assert lines[i] == real[i], f"\nours:  {lines[i]}\nreal:  {real[i]}"
    gpu = inventory.gpu(0)
    expected_row = REAL_MIG_TABLE.splitlines()[7].replace("00000000:10:1C.0", nvidia_bus_id(gpu.pci_bus_id))
    assert lines[7] == expected_row
    assert "40960MiB" in lines[8] and "400W" in lines[8]
    # Numbers are right-aligned in the same columns as the capture's (e.g. " 4864MiB    |").
    for i, (ours, theirs) in enumerate(zip(lines, real, strict=True)):
        if "MiB /" in theirs:
            assert [m.end() for m in re.finditer(r"MiB", ours)] == [
                m.end() for m in re.finditer(r"MiB", theirs)
            ], f"line {i}\nours:  {ours}\nreal:  {theirs}"


def test_list_gpus_shape_and_uuids(a100: tuple[DeviceState, Any], tmp_path: Path) -> None:
    state, inventory = a100
    migs = mig_names(inventory)
    state.prepare(claim(UID1, [*migs, "gpu-1"]))
    out = run_smi(container_root(tmp_path, [read_spec(state, UID1)]), "-L").stdout
    lines = out.splitlines()
    uuid = r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}"
    gpu_re = re.compile(rf"GPU (\d+): (.+) \(UUID: (GPU-{uuid})\)")
    mig_re = re.compile(rf"  MIG (\S+) +Device +(\d+): \(UUID: (MIG-{uuid})\)")
    for real in REAL_MIG_LIST.splitlines():  # the patterns describe the real output
        assert gpu_re.fullmatch(real) or mig_re.fullmatch(real), real
    real_device_col = REAL_MIG_LIST.splitlines()[1].index("Device")
    assert [gpu_re.fullmatch(x) is not None for x in lines] == [True, False, False, True]
    g0, m0, m1, g1 = lines
    assert gpu_re.fullmatch(g0)[3] == inventory.gpu(0).uuid  # type: ignore[index]
    assert gpu_re.fullmatch(g1)[3] == inventory.gpu(1).uuid  # type: ignore[index]
    assert gpu_re.fullmatch(g0)[2] == "NVIDIA A100-SXM4-40GB"  # type: ignore[index]
    for i, line in enumerate((m0, m1)):
        m = mig_re.fullmatch(line)
        assert m is not None and int(m[2]) == i and line.index("Device") == real_device_col, line
    uuids = {d.uuid for n, d in inventory.devices.items() if n in migs}
    assert {mig_re.fullmatch(x)[3] for x in (m0, m1)} == uuids  # type: ignore[index]
    # nvidia-smi orders MIG devices by GPU-instance ID: the 3g.20gb (larger) first
    assert mig_re.fullmatch(m0)[1] == "3g.20gb"  # type: ignore[index]


def test_container_sees_only_its_devices(tmp_path: Path) -> None:
    state, inventory = make_state(tmp_path, "gpus:\n- profile: h100-sxm5-80gb\n  count: 4\n")
    state.prepare(claim(UID1, ["gpu-2", "gpu-0"]))
    state.prepare(claim(UID2, ["gpu-3"]))
    one = container_root(tmp_path, [read_spec(state, UID1)], "one")
    two = container_root(tmp_path, [read_spec(state, UID2)], "two")
    out1 = run_smi(one, "-L").stdout.splitlines()
    assert out1 == [
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {inventory.gpu(0).uuid})",
        f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {inventory.gpu(2).uuid})",
    ]
    assert run_smi(two, "-L").stdout == f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {inventory.gpu(3).uuid})\n"
    table = run_smi(one).stdout
    assert table.count("NVIDIA H100 80GB HBM3") == 2 and "MIG devices" not in table
    assert "81559MiB" in table and "700W" in table
    rows = [line for line in table.splitlines() if "NVIDIA H100" in line]
    real_rows = [line for line in REAL_GPU_TABLE.splitlines() if "NVIDIA A100" in line]
    assert [skeleton(r) for r in rows] == [skeleton(r) for r in real_rows]
    assert rows[1].startswith("|   1  NVIDIA H100 80GB HBM3          On  |")


def test_query_gpu_csv_fields_and_format_options(tmp_path: Path) -> None:
    state, inventory = make_state(tmp_path, "gpus:\n- profile: h100-sxm5-80gb\n  count: 2\n")
    state.prepare(claim(UID1, ["gpu-1"]))
    root = container_root(tmp_path, [read_spec(state, UID1)])
    fields = "name,uuid,memory.total,driver_version,pci.bus_id,index,compute_cap"
    out = run_smi(root, f"--query-gpu={fields}", "--format=csv").stdout
    gpu = inventory.gpu(1)
    bus = nvidia_bus_id(gpu.pci_bus_id)
    assert out == (
        "name, uuid, memory.total [MiB], driver_version, pci.bus_id, index, compute_cap\n"
        f"NVIDIA H100 80GB HBM3, {gpu.uuid}, 81559 MiB, 580.105.08, {bus}, 0, 9.0\n"
    )
    assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]", bus)
    out = run_smi(root, "--query-gpu", "name,memory.total", "--format=csv,noheader,nounits").stdout
    assert out == "NVIDIA H100 80GB HBM3, 81559\n"
    # The real sample's header and value formats, for the fields it has:
    real = run_smi(root, "--query-gpu=name,compute_cap,memory.total", "--format=csv").stdout
    assert real.splitlines()[0] == REAL_QUERY.splitlines()[0]
    assert re.fullmatch(r"[^,]+, \d+\.\d, \d+ MiB", real.splitlines()[1])
    bad = run_smi(root, "--query-gpu=bogus", "--format=csv", check=False)
    assert bad.returncode == 2 and 'Field "bogus" is not a valid field to query.' in bad.stderr
    # without --format: CSV with a header (qnofmt.txt of the H200 capture)
    assert run_smi(root, "--query-gpu=name").stdout == "name\nNVIDIA H100 80GB HBM3\n"


def test_faults_show_while_the_container_runs(tmp_path: Path) -> None:
    """GpuFault state written by the plugin (Effects.gpus) changes what a running container's
    nvidia-smi prints: temperature and thermal slowdown, ECC counters, a lost GPU (docs/faults.md)."""
    state, inventory = make_state(tmp_path, "gpus:\n- profile: h100-sxm5-80gb\n  count: 2\n")
    state.prepare(claim(UID1, ["gpu-1"]))
    root = container_root(tmp_path, [read_spec(state, UID1)])
    smi = state.nvidia_smi
    assert smi is not None
    gpu, other = inventory.gpu(1), inventory.gpu(0)
    fields = (
        "temperature.gpu,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,"
        "clocks_event_reasons.hw_thermal_slowdown"
    )
    assert run_smi(root, f"--query-gpu={fields}", "--format=csv,noheader").stdout == "29, 0, 0, Not Active\n"

    monitor = GpuMonitor(inventory, state.holdings, smi, "node-a", DRIVER)
    monitor.set_faults({gpu.uuid: {"temperature": 97, "ecc_sbe": 5, "ecc_dbe": 2}, other.uuid: {"lost": 1}})
    monitor.sample()
    out = run_smi(root, f"--query-gpu={fields}", "--format=csv")
    assert out.stdout.splitlines() == [fields.replace(",", ", "), "97, 5, 2, Active"]
    row = run_smi(root).stdout.splitlines()
    assert any(
        line.startswith("|   0  NVIDIA H100 80GB HBM3") and line.endswith("|                    2 |")
        for line in row
    )
    assert any(line.startswith("| N/A   97C    P0") for line in row), row  # another GPU's loss is not ours

    monitor.set_faults({gpu.uuid: {"lost": 1}})
    monitor.sample()
    lost = run_smi(root, "-L", check=False)
    bus = nvidia_bus_id(gpu.pci_bus_id)[4:]
    assert (lost.returncode, lost.stdout) == (
        15,
        f"Unable to determine the device handle for GPU{bus}: GPU is lost.  "
        "Reboot the system to recover this GPU\n",
    )
    assert run_smi(root, check=False).returncode == 15
    assert run_smi(root, "--version").returncode == 0

    monitor.set_faults({})
    monitor.sample()
    assert run_smi(root, f"--query-gpu={fields}", "--format=csv,noheader").stdout == "29, 0, 0, Not Active\n"


def test_no_devices_and_unsupported_options(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_bytes(binary_bytes())
    (root / "usr/bin/nvidia-smi").chmod(0o755)
    proc = run_smi(root, check=False)  # no device files at all: NVML finds no driver
    assert (proc.returncode, proc.stdout) == (9, "")
    assert proc.stderr.startswith(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )
    (root / "var/run/dra-fake/nvidia-smi/devices").mkdir(parents=True)  # none of them ours
    proc = run_smi(root, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (6, "", "No devices were found\n")
    state, _ = make_state(tmp_path, "gpus:\n- profile: l40s\n")
    state.prepare(claim(UID1, ["gpu-0"]))
    root = container_root(tmp_path, [read_spec(state, UID1)])
    bogus = run_smi(root, "--bogus", check=False)  # bogus.txt of the H200 capture
    assert (bogus.returncode, bogus.stderr) == (
        255,
        "ERROR: Option --bogus is not recognized. Please run 'nvidia-smi -h'.\n\n",
    )
    assert "dra-fake" not in run_smi(root, "--version").stdout


def test_nvidia_smi_shows_the_sample_the_metrics_serve(tmp_path: Path) -> None:
    """One source of truth: a pod's simulated load shows in nvidia-smi inside its container with
    the very numbers of the same sample's DCGM metrics (docs/observability.md)."""
    from prometheus_client.parser import text_string_to_metric_families

    state, inventory = make_state(tmp_path, "gpus:\n- profile: h100-sxm5-80gb\n  count: 2\n")
    state.prepare(claim(UID1, ["gpu-1"]))
    root = container_root(tmp_path, [read_spec(state, UID1)])
    assert state.nvidia_smi is not None
    pod = {
        "metadata": {
            "name": "train",
            "namespace": "default",
            "uid": "pod-1",
            "annotations": {
                "dra-fake.dev/simulated-gpu-utilization": "60-90",
                "dra-fake.dev/simulated-gpu-memory": "20Gi",
            },
        },
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"c-{UID1[:4]}"}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}],
        },
        "status": {"phase": "Running"},
    }
    monitor = GpuMonitor(inventory, state.holdings, state.nvidia_smi, NODE, DRIVER)
    monitor.set_pods([pod])
    text = monitor.sample()
    values = {
        (s.name, s.labels["gpu"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("pod") == "train"
    }
    util, used, power = (
        values[(n, "1")] for n in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE")
    )
    assert 60 <= util <= 90 and used == 20480 and 68.92 < power < 700
    fields = "utilization.gpu,memory.used,memory.free,power.draw,clocks.sm,temperature.gpu"
    out = run_smi(root, f"--query-gpu={fields}", "--format=csv,noheader,nounits").stdout
    temp = values[("DCGM_FI_DEV_GPU_TEMP", "1")]
    # nvidia-smi's free is one MiB above total - reserved - used (docs/nvml.md#free-memory)
    free = 81559 - 480 - 20480 + 1
    assert out == f"{int(util)}, 20480, {free}, {power:.2f}, 1980, {int(temp)}\n"
    assert any(f"{int(util)}%      Default" in line for line in run_smi(root).stdout.splitlines())


def test_mig_instances_of_the_container(a100: tuple[DeviceState, Any], tmp_path: Path) -> None:
    """In MIG mode a container's NVML holds only its own MIG devices: `mig -lgi` and `-lci` list
    their GPU and compute instances (layout of the real tables; IDs from the device files)."""
    state, inventory = a100
    state.prepare(claim(UID1, mig_names(inventory)))
    root = container_root(tmp_path, [read_spec(state, UID1)])
    lgi = run_smi(root, "mig", "-lgi").stdout.splitlines()
    assert lgi[:5] == [
        "+-------------------------------------------------------+",
        "| GPU instances:                                        |",
        "| GPU   Name             Profile  Instance   Placement  |",
        "|                          ID       ID       Start:Size |",
        "|=======================================================|",
    ]
    # GI 2 is the 3g.20gb at memory slice 4, GI 7 the 1g.5gb at 0 (by GI ID, as NVML lists them)
    assert lgi[5::2] == [
        "|   0  MIG 3g.20gb          9        2          4:4     |",
        "|   0  MIG 1g.5gb          19        7          0:1     |",
    ]
    lci = run_smi(root, "mig", "-lci").stdout.splitlines()
    rows = [line for line in lci if re.match(r"\|   0 ", line)]
    assert [row.split()[2:4] for row in rows] == [["2", "MIG"], ["7", "MIG"]]
    assert all(len(line) == 70 for line in lci)
    # the GPU without MIG devices in this container has none to list
    state.prepare(claim(UID2, ["gpu-1"]))
    other = container_root(tmp_path, [read_spec(state, UID2)], "other")
    assert run_smi(other, "mig", "-lgi").stdout == "No MIG-enabled devices found.\n"


def test_q_shows_the_mig_devices(a100: tuple[DeviceState, Any], tmp_path: Path) -> None:
    """-q -x: one <mig_device> per MIG device, the elements of 580's DTD (NVIDIA's MIG fixture,
    docs/reference/nvidia-smi.md); -q: the same under "MIG Devices"."""
    import xml.etree.ElementTree as ET

    state, inventory = a100
    state.prepare(claim(UID1, mig_names(inventory)))
    root = container_root(tmp_path, [read_spec(state, UID1)])
    gpu = ET.fromstring(run_smi(root, "-q", "-x").stdout).find("gpu")
    assert gpu is not None
    devices = gpu.findall("mig_devices/mig_device")
    assert [d.findtext("gpu_instance_id") for d in devices] == ["2", "7"]
    assert [child.tag for child in devices[0]] == [
        "index",
        "gpu_instance_id",
        "compute_instance_id",
        "device_attributes",
        "ecc_error_count",
        "fb_memory_usage",
        "bar1_memory_usage",
    ]
    shared = devices[1].find("device_attributes/shared")
    assert shared is not None and [c.tag for c in shared] == [
        "multiprocessor_count",
        "copy_engine_count",
        "encoder_count",
        "decoder_count",
        "ofa_count",
        "jpg_count",
    ]
    assert devices[1].findtext("device_attributes/shared/multiprocessor_count") == "14"  # A100 1g.5gb
    assert devices[1].findtext("fb_memory_usage/total", "").endswith(" MiB")
    text = run_smi(root, "-q").stdout
    assert "    MIG Devices\n        MIG Device\n            Index" + " " * 38 + ": 0\n" in text
    assert text.count("        MIG Device\n") == 2
