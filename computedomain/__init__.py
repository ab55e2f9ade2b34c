"""Everything `compute-domain.nvidia.com`: the ComputeDomain controller (controller/), the
compute-domain kubelet plugin (plugin/), the simulated IMEX daemon (daemon/), and what they share
(api.py: NVIDIA's names; imex.py: the IMEX directory). docs/computedomain.md."""
