"""The compute-domain kubelet plugin (`dra-fake compute-domain-kubelet-plugin`): IMEX channel and
daemon claims, on the driver-agnostic core (dra_fake.core)."""
