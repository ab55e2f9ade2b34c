"""The ComputeDomain controller (`dra-fake compute-domain-controller`, kopf): see docs/computedomain.md."""
