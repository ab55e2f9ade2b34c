"""dra-fake's nvidia-smi against the real one: the captures of nvidia-smi 580.159.04 on a real H200
(tests/data/nvidia-smi/h200-580, README there) and `nvidia-smi -q -x` of an H100 on 580.105.08
(tests/data/nvidia-smi/qx). Our side: an idle simulated H200, its device and live files written by
the plugin's own code, nvidia-smi run "in its container" (tests/smi_container.py).

Values that belong to the capturing machine or moment (MACHINE: UUID, serial, bus ID, date,
temperatures, power draw, current SM/graphics clock) are compared by shape only, where the board
sits in its chassis (PLATFORM) not at all; every other value must be the real tool's.
"""

from __future__ import annotations

import gzip
import re
import signal
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from smi_container import (
    DRIVER,
    LIBRARY_GAPS,
    NODE,
    UID1,
    claim,
    container_root,
    make_state,
    read_spec,
    run_smi,
)

from dra_fake.gpu.monitor import GpuMonitor
from dra_fake.gpu.nvidia_smi import CONTAINER_BINARY

DATA = Path(__file__).parent / "data" / "nvidia-smi"
CAPTURE = DATA / "h200-580"

MACHINE = {
    "timestamp",
    "serial",
    "uuid",
    "pci.bus_id",
    "pci.bus",
    "pci.device",
    "temperature.gpu",
    "temperature.gpu.tlimit",
    "temperature.memory",
    "power.draw",
    "power.draw.average",
    "power.draw.instant",
    "clocks.current.graphics",
    "clocks.current.sm",
}
# Where the board sits (chassis, slot, tray, host, module, peer type): the H200 VM answers numbers,
# the H100 HGX of qx-h100.xml N/A for all but the module; not a value of the model.
PLATFORM = {
    f"platform.{f}"
    for f in ("chassis_serial_number", "slot_number", "tray_index", "host_id", "peer_type", "module_id")
} | {"platform.gpu_fabric_guid"}


def capture(name: str) -> tuple[list[str], str, int]:
    """A capture file: its command line (argv after nvidia-smi), its output, its exit code."""
    lines = (CAPTURE / name).read_text().split("\n")
    command, *body = lines
    rc_line = next(i for i in range(len(body) - 1, -1, -1) if body[i].startswith("rc="))
    output = "\n".join(body[:rc_line])
    argv = command.removeprefix("$ ").split()
    if argv[0] == "timeout":
        argv = argv[2:]
    return argv[1:], output + ("\n" if output else ""), int(body[rc_line][3:])


def every_field() -> list[tuple[str, str, int]]:
    """query-every-field.txt: (field, output, exit code) for each of the 218 names queried."""
    lines = (CAPTURE / "query-every-field.txt").read_text().splitlines()
    out = []
    i = 0
    while i < len(lines):
        field, _, value = lines[i].partition("\t")
        if value.startswith("ERROR:"):  # the message, a blank line, rc=N
            out.append((field, f"{value}\n{lines[i + 1]}\n", int(lines[i + 2].removeprefix("rc="))))
            i += 3
        else:
            out.append((field, value + "\n", 0))
            i += 1
    return out


def shape(text: str) -> str:
    return re.sub(r"[0-9a-fA-F]", "0", text)


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A container holding one idle simulated H200 (live files written by a monitor sample)."""
    tmp = tmp_path_factory.mktemp("h200")
    state, inventory = make_state(tmp, "gpus:\n- profile: h200-sxm-141gb\n")
    state.prepare(claim(UID1, ["gpu-0"]))
    assert state.nvidia_smi is not None
    GpuMonitor(inventory, state.holdings, state.nvidia_smi, NODE, DRIVER).sample()
    gpu = inventory.gpu(0)
    return {"root": container_root(tmp, [read_spec(state, UID1)]), "uuid": gpu.uuid, "gpu": gpu}


def smi(h200: dict[str, Any], *args: str) -> tuple[str, int]:
    proc = run_smi(h200["root"], *args, check=False)
    return proc.stdout + proc.stderr, proc.returncode


def bus_id(h200: dict[str, Any]) -> str:
    out, _ = smi(h200, "--query-gpu=pci.bus_id", "--format=csv,noheader")
    return out.strip()


# ---- --query-gpu ---------------------------------------------------------------------------------


def test_every_query_field_as_the_real_tool(h200: dict[str, Any]) -> None:
    """Each of the 218 names of query-every-field.txt, queried alone as the capture did (the shell
    split the four `N: Mode` lines of the compute_mode help into two arguments): same exit code,
    same message, same value unless the value is the machine's."""
    fields = every_field()
    assert len(fields) == 218
    wrong = {}
    for field, real, real_rc in fields:
        out, rc = smi(h200, *f"--query-gpu={field}".split(), "--format=csv,noheader")
        if field in PLATFORM:
            same = rc == 0 and out.count("\n") == 1
        elif field in LIBRARY_GAPS:
            same = (out, rc) == (LIBRARY_GAPS[field][0] + "\n", 0) and out != real
        elif field in MACHINE:
            same = rc == real_rc and shape(out) == shape(real)
        else:
            same = rc == real_rc and out == real
        if not same:
            wrong[field] = (out, rc, real, real_rc)
    assert not wrong, "\n".join(
        f"{f}: ours {o!r} rc={r}, real {x!r} rc={y}" for f, (o, r, x, y) in wrong.items()
    )


@pytest.mark.parametrize("name", ["qcsv.txt", "qcsvnu.txt", "qextra.txt", "qnofmt.txt"])
def test_query_lines_as_the_real_tool(h200: dict[str, Any], name: str) -> None:
    argv, real, rc = capture(name)
    out, our_rc = smi(h200, *argv)
    assert our_rc == rc
    header = argv[0].removeprefix("--query-gpu=").split(",")
    ours, theirs = out.splitlines(), real.splitlines()
    assert len(ours) == len(theirs)
    if "noheader" not in " ".join(argv):
        assert ours[0] == theirs[0]  # headers and units
    for mine, real_line in zip(ours[-1:], theirs[-1:], strict=True):
        values, real_values = mine.split(", "), real_line.split(", ")
        assert len(values) == len(real_values) == len(header)
        for field, value, real_value in zip(header, values, real_values, strict=True):
            canonical = {"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory"}.get(
                field, field
            )
            if canonical in LIBRARY_GAPS:
                assert value in (LIBRARY_GAPS[canonical][0], LIBRARY_GAPS[canonical][0].split()[0]), field
            elif canonical in MACHINE:
                assert shape(value) == shape(real_value), field
            else:
                assert value == real_value, field


@pytest.mark.parametrize(
    "name",
    [
        "bogus.txt",
        "badfmt.txt",
        "qbad.txt",
        "i0.txt",
        "ibad.txt",
        "ibadq.txt",
        "lgi.txt",
        "lci.txt",
        "lcip.txt",
    ],
)
def test_refusals_and_messages_as_the_real_tool(h200: dict[str, Any], name: str) -> None:
    argv, real, rc = capture(name)
    assert smi(h200, *argv) == (real, rc)


def test_selecting_a_gpu_by_uuid_bus_id_and_index(h200: dict[str, Any]) -> None:
    for name, value in (("iuuid.txt", h200["uuid"]), ("ibus.txt", bus_id(h200))):
        argv, real, rc = capture(name)
        argv[1] = value  # the machine's UUID or bus ID -> ours
        assert smi(h200, *argv) == (real, rc)
    out, rc = smi(h200, "-i", "0", "--query-gpu=index,name", "--format=csv,noheader")
    assert (out, rc) == ("0, NVIDIA H200\n", 0)


def test_version_as_the_real_tool(h200: dict[str, Any]) -> None:
    argv, real, rc = capture("ver.txt")
    assert smi(h200, *argv) == (real, rc)


def test_compute_apps_as_the_real_tool(h200: dict[str, Any]) -> None:
    for name in ("apps.txt", "appsnh.txt"):
        argv, real, rc = capture(name)
        assert smi(h200, *argv) == (real, rc)
    out, rc = smi(h200, "--query-compute-apps=pid,bogus", "--format=csv")
    assert (out, rc) == ('Field "bogus" is not a valid field to query.\n\n', 2)


# ---- the table, -L -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["smi.txt", "smi_i0.txt"])
def test_table_as_the_real_tool(h200: dict[str, Any], name: str) -> None:
    """Line by line; the date, bus ID, temperature and power draw are the machine's (shape only)."""
    argv, real, rc = capture(name)
    out, our_rc = smi(h200, *argv)
    assert our_rc == rc
    ours, theirs = out.splitlines(), real.splitlines()
    assert len(ours) == len(theirs)
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}", ours[0])
    machine = re.compile(r"\d\d\d\d\d\d\d\d:\w\w:\w\w\.\d| +\d+C| +\d+W / ")  # right-aligned: spaces too
    for mine, real_line in zip(ours[1:], theirs[1:], strict=True):
        assert len(mine) == len(real_line)
        assert machine.sub("#", mine) == machine.sub("#", real_line)


def test_list_as_the_real_tool(h200: dict[str, Any]) -> None:
    argv, real, rc = capture("L.txt")
    out, our_rc = smi(h200, *argv)
    assert (our_rc, out) == (rc, real.replace(re.findall(r"GPU-[0-9a-f-]+", real)[0], h200["uuid"]))


# ---- loop mode -----------------------------------------------------------------------------------


def test_loop_repeats_until_terminated(h200: dict[str, Any]) -> None:
    """loop.txt / loopms.txt: the header once, a line per interval, until the signal; SIGTERM and
    SIGINT end it cleanly (exit 0, everything printed)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = subprocess.Popen(
            [str(h200["root"] / CONTAINER_BINARY.lstrip("/")), "--query-gpu=utilization.gpu", "--format=csv",
             "-lms", "100"],
            env={"DRA_FAKE_ROOT": str(h200["root"])},
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(4)]  # blocks until each sample is printed
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert lines[0] == "utilization.gpu [%]\n"
        assert all(re.fullmatch(r"\d+ %\n", line) for line in lines[1:] + rest.splitlines(keepends=True))
    argv, real, _ = capture("loop.txt")
    assert argv[-2:] == ["-l", "1"] and real.count("utilization.gpu [%]") == 1


# ---- help ----------------------------------------------------------------------------------------


def quoted_names(text: str) -> list[list[str]]:
    return [re.findall(r'"([^"]+)"', line) for line in text.splitlines() if line.startswith('"')]


def test_help_query_gpu_lists_the_real_fields_in_our_words(h200: dict[str, Any]) -> None:
    _, real, _ = capture("helpq.txt")
    out, rc = smi(h200, "--help-query-gpu")
    assert rc == 0
    assert quoted_names(out) == quoted_names(real)  # names, aliases, order (and the compute modes)
    sections = re.compile(r"^Section about (.+) properties$", re.M)
    assert sections.findall(out) == sections.findall(real)
    assert out.splitlines()[:2] == real.splitlines()[:2]
    structure = set(sections.findall(real)) | {real.splitlines()[0]}
    prose = {x for x in real.splitlines() if len(x) > 40 and not x.startswith('"') and x not in structure}
    assert not prose & {x for x in out.splitlines() if not sections.match(x)}  # NVIDIA's words are not ours


def test_help_has_the_real_options_in_our_words(h200: dict[str, Any]) -> None:
    _, real, _ = capture("h.txt")
    out, rc = smi(h200, "-h")
    assert rc == 0
    option = re.compile(r"^ {2,}(-[a-z]+,? +)?(--[a-z-]+=?)", re.M)
    assert option.findall(out) == option.findall(real)
    headings = re.compile(r"^ ?[A-Z][A-Za-z vGPU]+:.*$", re.M)
    assert [h.split(":")[0] for h in headings.findall(out)] == [
        h.split(":")[0] for h in headings.findall(real)
    ]
    assert out.splitlines()[0] == real.splitlines()[0]
    prose = {x.strip() for x in real.splitlines() if len(x.strip()) > 50 and not x.startswith("http")}
    assert not prose & {line.strip() for line in out.splitlines()}
    assert smi(h200, "--help")[0] == out


def test_help_query_compute_apps_lists_the_real_fields(h200: dict[str, Any]) -> None:
    _, real, _ = capture("helpapps.txt")
    out, rc = smi(h200, "--help-query-compute-apps")
    assert rc == 0 and quoted_names(out) == quoted_names(real)


# ---- mig, topo, nvlink ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lgip.txt", "lgipp.txt"])
def test_mig_profiles_as_the_real_tool(h200: dict[str, Any], name: str) -> None:
    argv, real, rc = capture(name)
    assert smi(h200, *argv) == (real, rc)


def test_topo_matrix_shape(h200: dict[str, Any]) -> None:
    argv, real, rc = capture("topo.txt")
    out, our_rc = smi(h200, *argv)
    assert our_rc == rc
    ours, theirs = out.splitlines(), real.splitlines()
    assert ours[0] == theirs[0]  # the header, underlined with the same escape codes
    assert ours[1].split("\t")[:2] == theirs[1].split("\t")[:2] == ["GPU0", " X "]
    assert len(ours[1].split("\t")) == len(theirs[1].split("\t"))
    codes = re.compile(r"^  (\S+) +=", re.M)
    assert codes.findall(out) == codes.findall(real)


def test_nvlink_status_shape(h200: dict[str, Any]) -> None:
    """nvl.txt: a GPU without NVLink prints nothing; one with NVLink a line per link."""
    argv, _, rc = capture("nvl.txt")
    out, our_rc = smi(h200, *argv)
    assert our_rc == rc == 0
    line = re.compile(r"GPU \d+: .+ \(UUID: GPU-[0-9a-f-]+\)|\t Link \d+: (\d+\.\d{3} GB/s|<inactive>)")
    assert all(line.fullmatch(x) for x in out.splitlines()), out


# ---- -q, -q -x -----------------------------------------------------------------------------------


def element_paths(root: ET.Element) -> list[str]:
    seen: list[str] = []

    def walk(e: ET.Element, path: str) -> None:
        here = f"{path}/{e.tag}"
        if here not in seen:
            seen.append(here)
        for child in e:
            walk(child, here)

    walk(root, "")
    return seen


def qx(h200: dict[str, Any]) -> ET.Element:
    out, rc = smi(h200, "-q", "-x")
    assert rc == 0
    assert out.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n')
    return ET.fromstring(out)


def test_q_x_has_the_element_structure_of_580(h200: dict[str, Any]) -> None:
    """The element paths of the H100's `-q -x` on 580 (same DTD as the H200), in their order."""
    real = ET.fromstring(gzip.decompress((DATA / "qx" / "qx-h100.xml.gz").read_bytes()))
    ours = qx(h200)
    # nvmlDeviceGetSupportedMemoryClocks is not implemented by dra-fake's NVML yet: N/A, no children
    gap = "/nvidia_smi_log/gpu/supported_clocks/"
    assert ours.findtext("gpu/supported_clocks") == "N/A"
    assert element_paths(ours) == [p for p in element_paths(real) if not p.startswith(gap)]


# -q -x element -> (the --query-gpu field with the same value, the unit -q -x adds)
XML_FIELDS = {
    "product_name": ("name", ""),
    "persistence_mode": ("persistence_mode", ""),
    "addressing_mode": ("addressing_mode", ""),
    "mig_mode/current_mig": ("mig.mode.current", ""),
    "accounting_mode": ("accounting.mode", ""),
    "serial": ("serial", ""),
    "uuid": ("uuid", ""),
    "vbios_version": ("vbios_version", ""),
    "inforom_version/img_version": ("inforom.img", ""),
    "inforom_version/ecc_object": ("inforom.ecc", ""),
    "pci/pci_bus_id": ("pci.bus_id", ""),
    "pci/pci_gpu_link_info/pcie_gen/max_link_gen": ("pcie.link.gen.max", ""),
    "pci/pci_gpu_link_info/link_widths/max_link_width": ("pcie.link.width.max", "x"),
    "performance_state": ("pstate", ""),
    "clocks_event_reasons/clocks_event_reason_gpu_idle": ("clocks_event_reasons.gpu_idle", ""),
    "fb_memory_usage/total": ("memory.total", " MiB"),
    "fb_memory_usage/reserved": ("memory.reserved", " MiB"),
    "fb_memory_usage/used": ("memory.used", " MiB"),
    "fb_memory_usage/free": ("memory.free", " MiB"),
    "compute_mode": ("compute_mode", ""),
    "utilization/gpu_util": ("utilization.gpu", " %"),
    "ecc_mode/current_ecc": ("ecc.mode.current", ""),
    "remapped_rows/row_remapper_histogram/row_remapper_histogram_max": (
        "remapped_rows.histogram.max",
        " bank(s)",
    ),
    "temperature/gpu_temp": ("temperature.gpu", " C"),
    "gpu_power_readings/current_power_limit": ("enforced.power.limit", " W"),
    "gpu_power_readings/max_power_limit": ("power.max_limit", " W"),
    "clocks/mem_clock": ("clocks.current.memory", " MHz"),
    "max_clocks/sm_clock": ("clocks.max.sm", " MHz"),
    "applications_clocks/graphics_clock": ("clocks.applications.graphics", " MHz"),
}


def test_q_x_values_equal_the_query_fields(h200: dict[str, Any]) -> None:
    gpu = qx(h200).find("gpu")
    assert gpu is not None
    fields = ",".join(field for field, _ in XML_FIELDS.values())
    out, rc = smi(h200, f"--query-gpu={fields}", "--format=csv,noheader,nounits")
    assert rc == 0
    values = dict(zip(XML_FIELDS, out.strip().split(", "), strict=True))
    for path, (field, unit) in XML_FIELDS.items():
        value = values[path]
        assert gpu.findtext(path) == ("N/A" if value == "[N/A]" else value + unit), (path, field)
    assert gpu.get("id") == values["pci/pci_bus_id"]


# -d name -> the sections -q prints for it (labels at the first level under the GPU)
SECTIONS = {
    "MEMORY": ["FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"],
    "UTILIZATION": ["Utilization"],
    "ECC": ["ECC Mode", "ECC Errors"],
    "TEMPERATURE": ["Temperature"],
    "POWER": ["GPU Power Readings", "GPU Memory Power Readings ", "Module Power Readings"],
    "CLOCK": ["Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks", "Max Clocks",
              "Max Customer Boost Clocks", "Clock Policy"],
    "COMPUTE": ["Compute Mode"],
    "PIDS": ["Processes"],
    "PERFORMANCE": ["Performance State", "Clocks Event Reasons", "Clocks Event Reasons Counters",
                    "Sparse Operation Mode"],
    "SUPPORTED_CLOCKS": ["Supported Clocks"],
    "PAGE_RETIREMENT": ["Retired Pages"],
    "ACCOUNTING": ["Accounting Mode", "Accounting Mode Buffer Size"],
    "ENCODER_STATS": ["Encoder Stats"],
    "SUPPORTED_GPU_TARGET_TEMP": ["Supported GPU Target Temp"],
    "VOLTAGE": [],
    "FBC_STATS": ["FBC Stats"],
    "ROW_REMAPPER": ["Remapped Rows"],
    "GSP_FIRMWARE_VERSION": ["GSP Firmware Version"],
    "POWER_SMOOTHING": ["Power Smoothing"],
    "POWER_PROFILES": ["Workload Power Profiles"],
}  # fmt: skip


def first_level(text: str) -> list[str]:
    """The labels under the GPU (a group title as printed, trailing space and all)."""
    return [
        line[4:] if " : " not in line else line[4:].split(" : ")[0].rstrip()
        for line in text.splitlines()
        if re.match(r"    \S", line)
    ]


def test_q_text_layout(h200: dict[str, Any]) -> None:
    """The NVSMI LOG header, then the GPU: every line a group title or `label : value` with the
    colon in column 56 (580; the process entries keep the 43 of older drivers), four spaces per
    level (docs/reference/nvidia-smi.md)."""
    out, rc = smi(h200, "-q")
    assert rc == 0
    lines = out.splitlines()
    assert lines[:3] == ["", "==============NVSMI LOG==============", ""]
    assert [line.split(":")[0].rstrip() for line in lines[3:6]] == [
        "Timestamp",
        "Driver Version",
        "CUDA Version",
    ]
    assert lines[7] == "Attached GPUs" + " " * 42 + ": 1"
    assert lines[8] == f"GPU {bus_id(h200)}"
    for line in lines[9:]:
        assert not line or re.fullmatch(r"(    )+\S.*", line), line
        column = 41 if line.startswith("    Processes ") else 54
        assert " : " not in line or line.index(" : ") == column or len(line.split(" : ")[0]) > column, line
    labels = first_level(out)
    assert labels[:3] == ["Product Name", "Product Brand", "Product Architecture"]
    for section in SECTIONS.values():
        assert all(label in labels for label in section if label != "Supported Clocks")


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_q_display_sections(h200: dict[str, Any], name: str) -> None:
    out, rc = smi(h200, "-q", "-d", name)
    assert rc == 0
    assert out.splitlines()[8] == f"GPU {bus_id(h200)}"
    assert first_level(out) == SECTIONS[name]


def test_q_display_refuses_an_unknown_section(h200: dict[str, Any]) -> None:
    out, rc = smi(h200, "-q", "-d", "BOGUS")
    assert rc == 2 and "BOGUS" in out


def test_changing_a_gpu_is_refused_as_nvml_refuses_it(h200: dict[str, Any]) -> None:
    """-c is the compute mode (h.txt), not a count: NVML refuses every change to a simulated GPU
    (NO_PERMISSION), and nvidia-smi stops with exit code 4 (nvidia-smi(1))."""
    out, rc = smi(h200, "-c", "0")
    assert (out, rc) == (
        f"Unable to set the compute mode for GPU {bus_id(h200)}: Insufficient Permissions\n"
        "Terminating early due to previous errors.\n",
        4,
    )
    assert smi(h200, "-pm", "2")[1] == 2  # 0/DISABLED or 1/ENABLED only
