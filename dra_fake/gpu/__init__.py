"""The `gpu.nvidia.com` driver: GPU models (profiles), a node's inventory and its devices, NVIDIA's
ResourceSlices and DeviceClasses, opaque configs, container edits, the in-container nvidia-smi,
prepare/unprepare and the kubelet plugin process."""
