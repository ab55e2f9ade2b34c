"""What the ComputeDomain tests (tests/test_computedomain*.py) share: the UID of their domain."""

from __future__ import annotations

UID = "2f9c6a4e-0000-4000-8000-000000000001"
