"""Fleet mode (`dra-fake fleet`): hundreds of simulated GPU nodes from one process."""
