"""Fixtures several test modules share, each defined beside what it serves: the NVML library and the
device and live files it is loaded on (tests/nvmlbed.py)."""

from tests.nvmlbed import bed, lib_path, nvml  # noqa: F401
