"""Every thread of a plugin on one CPU.

A kubelet plugin's Python threads (gRPC handlers, claim GETs, the group commit's leader) take turns
on one interpreter lock, so the process never runs Python on two CPUs at once. What two CPUs add
is cost: each hand-off of the lock to a thread on the other CPU is a cross-CPU wake-up, and a burst
of prepares makes thousands. On one CPU the same hand-off is a plain context switch: with 16
concurrent 8-device prepares the plugin spent 0.79-0.83x the CPU per claim and answered its median
0.87-0.94x as late in four runs (docs/benchmarks/history.md#sixteenth-round-one-cpu). The
machinery trials of `make bench`, every variant started together, did not confirm it: the
prepare median pinned was better in 5, 10, 6 and 9 of 12 paired repetitions in four runs
(56f6e0b, 6a7d5d4, ee22336, 7c5f52a), 30 of 48 together, near a coin
(docs/benchmarks/history.md#machinery-on-trial).
So it is an opt-in, off by default (the chart's kubeletPlugin.cpuAffinity).

The CPU is the one the process is running on when it pins itself, so plugins started on one host
(a kind cluster's nodes) spread as the scheduler placed them, and it is within the process's
allowed set (a container's cpuset). Threads started later inherit the affinity of the thread
that starts them.
"""

from __future__ import annotations

import contextlib
import logging
import os

log = logging.getLogger(__name__)

TASKS = "/proc/self/task"


def running_on() -> int | None:
    """The CPU this thread last ran on (field 39 of /proc/thread-self/stat), or None."""
    try:
        with open("/proc/thread-self/stat") as f:
            # Fields after the command name, which is in parentheses and may hold spaces; the
            # first of them (index 0) is field 3.
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return None


def pin_to_one_cpu() -> int | None:
    """Pin every thread of this process to one CPU; returns it, or None when that failed (logged:
    the plugin serves either way). A process allowed one CPU only is left as it is."""
    try:
        allowed = os.sched_getaffinity(0)
        if len(allowed) == 1:
            return next(iter(allowed))
        cpu = running_on()
        if cpu not in allowed:
            cpu = min(allowed)
        pinned: set[int] = set()
        os.sched_setaffinity(0, {cpu})  # this thread first: what it starts from now on inherits
        # A thread started by another thread while we go through them is found on the next pass.
        while tids := {int(t) for t in os.listdir(TASKS)} - pinned:
            for tid in tids:
                with contextlib.suppress(ProcessLookupError):  # the thread ended meanwhile
                    os.sched_setaffinity(tid, {cpu})
            pinned |= tids
        return cpu
    except OSError as err:
        log.warning(
            "could not pin the process to one CPU; running on all it may use", extra={"error": str(err)}
        )
        return None
