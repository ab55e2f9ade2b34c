"""dra_fake.core.cpuaffinity: every thread of the process on one CPU it may use."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dra_fake.core import cpuaffinity

# In a child process: pinning the test runner would slow every test after this one.
PIN_IN_A_CHILD = """
import json, os, threading
from dra_fake.core.cpuaffinity import pin_to_one_cpu, running_on

release = threading.Event()
before = threading.Thread(target=release.wait)  # a thread started before the pinning
before.start()
allowed = sorted(os.sched_getaffinity(0))
cpu = pin_to_one_cpu()
after = threading.Thread(target=release.wait)  # one started after it inherits it
after.start()
tasks = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
release.set()
print(json.dumps({"allowed": allowed, "cpu": cpu, "tasks": tasks, "now_on": running_on()}))
"""


def test_every_thread_is_pinned_to_one_allowed_cpu_and_new_threads_inherit_it() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PIN_IN_A_CHILD], capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(out.stdout)
    assert result["cpu"] in result["allowed"]
    assert len(result["tasks"]) == 3, result  # the main thread and both others
    assert all(cpus == [result["cpu"]] for cpus in result["tasks"].values()), result
    assert result["now_on"] == result["cpu"]


def test_running_on_names_a_cpu_this_process_may_use() -> None:
    assert cpuaffinity.running_on() in os.sched_getaffinity(0)


def test_a_failed_pin_is_logged_and_the_process_runs_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})

    def refused(pid: int, cpus: set[int]) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setaffinity", refused)
    assert cpuaffinity.pin_to_one_cpu() is None
    assert "could not pin the process to one CPU" in caplog.text


def test_a_process_allowed_one_cpu_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})

    def must_not_be_called(pid: int, cpus: set[int]) -> None:
        raise AssertionError("sched_setaffinity called")

    monkeypatch.setattr(os, "sched_setaffinity", must_not_be_called)
    assert cpuaffinity.pin_to_one_cpu() == 3
