"""dra-fake: a DRA driver that simulates NVIDIA GPUs. docs/architecture.md is the map."""
