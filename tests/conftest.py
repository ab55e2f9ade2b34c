"""Fixtures several test modules share, each defined beside what it serves: the NVML library and the
device and live files it is loaded on (tests/nvmlbed.py); the node of two A100s, one in MIG mode,
whose claims nvidia-smi runs for (tests/smi_container.py); the kubelet gRPC layer's plugin on a
stand-in handler (tests/kubeletbed.py); the DeviceState the prepare tests run on (tests/statebed.py);
the idle simulated H200 the nvidia-smi golden tests compare (tests/smigolden.py); DRA_FAKE_WITHOUT
set for one test (tests/trialswitch.py)."""

from smi_container import a100  # noqa: F401

from tests.kubeletbed import env, root  # noqa: F401
from tests.nvmlbed import bed, lib_path, nvml  # noqa: F401
from tests.smigolden import h200  # noqa: F401
from tests.statebed import state  # noqa: F401
from tests.trialswitch import without  # noqa: F401
