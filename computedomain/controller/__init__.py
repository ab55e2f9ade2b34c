"""The ComputeDomain controller (`dra-fake compute-domain-controller`, kopf): claim templates,
daemon DaemonSets, status, deletion, orphan cleanup."""
