"""What the consumable shares tests (tests/test_shares*.py) share: the claims' UIDs and share IDs, and
the devices of tests/crash_helper.py's node that have consumable shares."""

from __future__ import annotations

API = "resource.nvidia.com/v1beta1"
DRIVER = "gpu.nvidia.com"
KIND = "k8s.gpu.nvidia.com/claim"
UID1 = "1a111111-1111-1111-1111-111111111111"
UID2 = "b2222222-2222-2222-2222-222222222222"
UID3 = "c3333333-3333-3333-3333-333333333333"
SHARE1 = "0d6a5f0e-1111-4c3b-8d6e-000000000001"
SHARE2 = "0d6a5f0e-2222-4c3b-8d6e-000000000002"
SHARED_GPU = "gpu-4"  # crash_helper: a full GPU with consumable shares (memory)
SHARED_MIG = "gpu-5-mig-1g10gb-19-0"  # crash_helper: a dynamic MIG device with consumable shares
MIB = 1 << 20
