"""The character-device drivers the host kernel has registered (/proc/devices, which is not
namespaced: a plugin pod sees the host's), for deciding which device nodes a container may get
(docs/reference/nvidia-gpu-driver.md#53-device-nodes-without-hardware)."""

from __future__ import annotations

import os
from pathlib import Path

# Tests and odd hosts point this at another file.
PROC_DEVICES_ENV = "ALT_PROC_DEVICES_PATH"


def proc_devices_path() -> Path:
    return Path(os.environ.get(PROC_DEVICES_ENV) or "/proc/devices")


def read_proc_devices(path: Path | None = None) -> str:
    """The text of /proc/devices (or `path`); "" when unreadable. Read with plain os calls: a
    prepare reads it, and a text file object costs three more system calls (fstat, ioctl, lseek)."""
    try:
        fd = os.open(path or proc_devices_path(), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def parse_char_majors(text: str) -> dict[int, str]:
    """Major -> name of the "Character devices:" section of a /proc/devices text."""
    majors: dict[int, str] = {}
    in_char_section = False
    for line in text.splitlines():
        if line.strip().endswith("devices:"):
            in_char_section = line.strip() == "Character devices:"
            continue
        parts = line.split()
        if in_char_section and len(parts) == 2 and parts[0].isdigit():
            majors[int(parts[0])] = parts[1]
    return majors


def char_majors(path: Path | None = None) -> dict[int, str]:
    """Registered character drivers, major -> name (the "Character devices:" section). An
    unreadable file gives {}: the callers then know of no driver, so they must treat {} as
    "cannot tell" where that matters."""
    return parse_char_majors(read_proc_devices(path))
