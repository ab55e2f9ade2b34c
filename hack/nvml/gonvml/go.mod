module github.com/dra-fake/dra-fake/hack/nvml/gonvml

go 1.24

require github.com/NVIDIA/go-nvml v0.13.4-1
