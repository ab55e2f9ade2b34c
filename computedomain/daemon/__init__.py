"""The simulated IMEX daemon a ComputeDomain daemon pod runs (`dra-fake imex-daemon run|check`)."""
