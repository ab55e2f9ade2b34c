"""dra-fake's nvidia-smi `-q` and `-q -x` against the real one (tests/smigolden.py): the element
structure of 580, values equal to the --query-gpu fields, the text layout, display sections, and
the refusal to change a GPU."""

from __future__ import annotations

import gzip
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from tests.smigolden import DATA, bus_id, smi

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
