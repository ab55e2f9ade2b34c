"""`dra-fake device-plugin`: the simulated GPUs through the kubelet's Device Plugin API, as NVIDIA's
k8s-device-plugin serves them (docs/classic-requests.md)."""
