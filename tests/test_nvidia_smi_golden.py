"""dra-fake's nvidia-smi against the real one: the captures of nvidia-smi 580.159.04 on a real H200
(tests/data/nvidia-smi/h200-580, README there) and `nvidia-smi -q -x` of an H100 on 580.105.08
(tests/data/nvidia-smi/qx). Our side: an idle simulated H200, its device and live files written by
the plugin's own code, nvidia-smi run "in its container" (tests/smi_container.py).

Values that belong to the capturing machine or moment (MACHINE: UUID, serial, bus ID, date,
temperatures, power draw, current SM/graphics clock) are compared by shape only, where the board
sits in its chassis (PLATFORM) not at all; every other value must be the real tool's.

Here: --query-gpu, the table and -L, loop mode, help, mig, topo and nvlink; `-q` and `-q -x` in
tests/test_nvidia_smi_golden_q.py; the captures and the simulated H200 in tests/smigolden.py.
"""

from __future__ import annotations

import re
import signal
import subprocess
from typing import Any

import pytest
from smi_container import (
    LIBRARY_GAPS,
)

from dra_fake.gpu.nvidia_smi import CONTAINER_BINARY
from tests.smigolden import MACHINE, PLATFORM, bus_id, capture, every_field, shape, smi

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
