# cloneset-operator — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

CARGO        ?= cargo
# Every binary is linked statically (glibc's crt-static), for the host's own target triple: the
# operator's image needs a static binary, and one build serves `make run`, the tests and the
# image. (With the triple named, build scripts and proc-macros stay dynamic, as they must.)
# The Rust release is rust-toolchain.toml's; the script makes it available (without a download
# when it is the installed stable) before anything here calls rustc.
HOST_TRIPLE  := $(shell bash e2e/scripts/rust-toolchain.sh)
export CARGO_BUILD_TARGET := $(HOST_TRIPLE)
TARGET_RUSTFLAGS := CARGO_TARGET_$(shell echo '$(HOST_TRIPLE)' | tr 'a-z-' 'A-Z_')_RUSTFLAGS
export $(TARGET_RUSTFLAGS) := -C target-feature=+crt-static
TARGET_DIR   := target/$(HOST_TRIPLE)/debug
OPERATOR     := $(TARGET_DIR)/cloneset-operator
LOCAL_CLUSTER:= $(TARGET_DIR)/local-cluster
# `make run` and `make cluster-up` share this control plane; `make test` uses its own.
CLUSTER_DIR  ?= target/local-cluster
TEST_CLUSTER_DIR ?= target/test-cluster
# The Kubernetes release the local control plane builds and runs: a minor listed in
# e2e/kubernetes-versions (its pinned patch, e.g. K8S_VERSION=1.32) or a full version; unset, the
# newest supported. Exported for the scripts and tests that start control planes.
K8S_VERSION  ?=
export K8S_VERSION
# The e2e test files `make e2e` runs (names under e2e/tests, space-separated); unset, all of them.
E2E_TESTS    ?=
export E2E_TESTS
# Real nodes (kubelet, containerd, runc) beside the simulated ones: one when run as root (they
# need it), none otherwise. REAL_NODES=0 turns them off.
REAL_NODES   ?= $(if $(filter 0,$(shell id -u)),1,0)
VERSION      := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -1)
# The commit every binary is built from, for `--version`, the build-info metric and the image's
# labels (empty outside a git checkout: the binary then says `unknown`).
export CLONESET_OPERATOR_REVISION := $(shell git describe --always --dirty --abbrev=12 --exclude='*' 2>/dev/null)
IMAGE        := docker.io/library/cloneset-operator:$(VERSION)
IMAGE_ARCHIVE:= target/image/cloneset-operator-$(VERSION).oci.tar
DIST_DIR     := target/dist
# The Helm release `make run` and `make deploy` share (its records in namespace default, the
# chart's objects in cloneset-system), so either may follow the other.
CHART_RELEASE = OPERATOR=$(OPERATOR) bash e2e/scripts/chart-release.sh

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'

.PHONY: build
build: toolchain disk-space ## Build the operator, the local control-plane tool and the simulated kubelet
	$(CARGO) build --workspace --bins

.PHONY: disk-space
# A full disk fails a build far from its cause (a linker's "Bus error", a test binary that cannot
# be written), so low space is named before the build; a warning only, as a warm checkout needs less.
DISK_WARN_GIB := 20
disk-space:
	@free=$$(df -P -k . | awk 'NR == 2 {print int($$4 / 1048576)}'); \
	if [ "$$free" -lt $(DISK_WARN_GIB) ]; then \
	  echo "make: warning: $$free GiB free on the disk of this checkout; a cold \`make test\` needs more (docs/development.md#prerequisites)"; \
	fi

.PHONY: run
# Safe by default: the local control plane in $(CLUSTER_DIR), started if needed. Another cluster
# only when named: CLUSTER=current (the current kubeconfig context) or CLUSTER=<context name>.
# The CRD, the admission policy and the RBAC come from the chart's Helm release (its manager
# Deployment at 0 replicas while this build runs here), so `make deploy` may follow, and the
# build here joins the chart's leader election. A CRD owned by anything else is left alone
# unless TAKE_OVER=1 says to take it (`cloneset-operator migrate`).
CLUSTER ?=
# With V1BETA1=1, where the local control plane's apiserver sends conversions to this process.
RUN_WEBHOOK_HOST := 127.0.0.1
RUN_WEBHOOK_ADDR := $(RUN_WEBHOOK_HOST):9876
run: build cluster-toolchain ## Run the operator on the local control plane (started if needed); CLUSTER=current or CLUSTER=<context> to use another cluster; V1BETA1=1 to serve v1beta1 too
	@set -e; \
	if [ -n "$(V1BETA1)" ] && [ -n "$(CLUSTER)" ]; then \
	  echo "make run: V1BETA1=1 needs the local control plane (its apiserver calls this process)"; exit 1; \
	fi; \
	if [ -z "$(CLUSTER)" ]; then \
	  eval "$$($(LOCAL_CLUSTER) --dir $(CLUSTER_DIR) up --real-nodes $(REAL_NODES))"; \
	  echo "make run: on the local control plane in $(CLUSTER_DIR); point kubectl at it with:"; \
	  echo "    export KUBECONFIG=$$KUBECONFIG"; \
	else \
	  if [ "$(CLUSTER)" = current ]; then ctx=$$(kubectl config current-context); else ctx="$(CLUSTER)"; fi; \
	  mkdir -p target; kc=target/run-kubeconfig; \
	  kubectl config view --minify --flatten --context="$$ctx" > $$kc || { echo "make run: no kubeconfig context $$ctx"; exit 1; }; \
	  export KUBECONFIG=$$PWD/$$kc; \
	  echo "make run: CLUSTER=$(CLUSTER): installing the chart's CRD, admission policy and RBAC on context $$ctx and running the operator there"; \
	fi; \
	$(CHART_RELEASE) "$$KUBECONFIG" --set manager.replicas=0 \
	  $(if $(V1BETA1),--set crds.v1beta1=true --set crds.conversionURL=https://$(RUN_WEBHOOK_ADDR)/convert); \
	if [ -n "$(V1BETA1)" ]; then \
	  echo "make run: v1beta1 served, converted by this process (until it stops; then run again, or without V1BETA1)"; \
	fi; \
	exec $(OPERATOR) run --leader-election-namespace=cloneset-system $(if $(V1BETA1),--webhook-addr=$(RUN_WEBHOOK_ADDR) --webhook-hosts=$(RUN_WEBHOOK_HOST))

.PHONY: test
test: build golden-modules ## Unit tests, then the e2e tests (`make e2e`) on K8S_VERSION
	$(CARGO) test --workspace --exclude e2e -- --include-ignored
	$(CARGO) test -p e2e --lib --bins
	@$(MAKE) --no-print-directory e2e

.PHONY: golden-modules
# The newer-fields test reads k8s.io/api from the module cache only (a test never reaches off
# the machine), so the modules its Go program pins are downloaded before the tests run.
golden-modules: cluster-toolchain
	@cd e2e/revision-golden/newer-fields && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download

.PHONY: e2e
# The e2e stage runs with the network guard on (e2e/scripts/net-guard.sh, when root): every packet
# to an address outside loopback is dropped and counted, and a count above zero fails the stage.
# So everything it runs is built and installed first.
e2e: net-guard-clear build previous-release cluster-toolchain ## E2e tests on K8S_VERSION against a local control plane started and stopped here, with the network guard on
	@bash e2e/scripts/build-helm.sh >/dev/null
	@bash e2e/scripts/cosign.sh version >/dev/null
	@$(LOCAL_CLUSTER) prepare --real-nodes $(REAL_NODES)
	$(CARGO) test -p e2e --test '*' --no-run
	@CARGO=$(CARGO) REAL_NODES=$(REAL_NODES) bash e2e/scripts/e2e-stage.sh $(LOCAL_CLUSTER) $(TEST_CLUSTER_DIR)

.PHONY: previous-release
# Built after this checkout, whose compiled dependencies it starts from.
previous-release: build ## Build the release an upgrade is tested from (e2e/previous-release): its operator and chart, once
	@CARGO=$(CARGO) bash e2e/scripts/build-previous-release.sh >/dev/null

.PHONY: test-matrix
# MINORS="1.32 1.37" runs those legs only; the others keep their last result in the table.
MINORS ?=
test-matrix: build cluster-toolchain ## `make e2e` on every supported Kubernetes minor (or MINORS); the table goes into docs/compatibility.md
	@bash e2e/scripts/test-matrix.sh $(MINORS)

.PHONY: net-guard-clear
net-guard-clear: ## Remove a network guard left installed by an interrupted `make test`
	@bash e2e/scripts/net-guard.sh remove

.PHONY: bench
bench: toolchain cluster-toolchain ## Benchmarks at scale on a local control plane of its own (target/bench-cluster); table + target/bench/results.json
	$(CARGO) build --release --workspace --bins
	@start=$$(date +%s); ./target/$(HOST_TRIPLE)/release/bench; rc=$$?; echo "make bench: took $$(( $$(date +%s) - start ))s"; exit $$rc

.PHONY: crds
crds: ## Regenerate the CRD and admission policy YAML (crds/ and the chart's copy) from src/api
	$(CARGO) build --bin cloneset-operator
	$(OPERATOR) crd > crds/apps.kruise.io_clonesets.yaml
	cp crds/apps.kruise.io_clonesets.yaml charts/cloneset-operator/files/apps.kruise.io_clonesets.yaml
	$(OPERATOR) crd --with-v1beta1 > charts/cloneset-operator/files/apps.kruise.io_clonesets-v1beta1.yaml
	$(OPERATOR) admission-policy > crds/apps.kruise.io_clonesets-admission-policy.yaml
	cp crds/apps.kruise.io_clonesets-admission-policy.yaml charts/cloneset-operator/files/apps.kruise.io_clonesets-admission-policy.yaml
	$(OPERATOR) deletion-protection-policy > charts/cloneset-operator/files/apps.kruise.io_clonesets-deletion-protection-policy.yaml

.PHONY: helm
helm: ## Build (once) the pinned helm into the cache
	@bash e2e/scripts/build-helm.sh

.PHONY: helm-lint
helm-lint: ## helm lint the chart
	@h=$$(bash e2e/scripts/build-helm.sh) && $$h lint --strict charts/cloneset-operator charts/cloneset-operator-migrate

.PHONY: lint
lint: toolchain helm-lint deny lint-workflows ## rustfmt check, clippy with warnings as errors, helm lint, cargo deny
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# cargo-deny, built once from crates.io into the cache: unoptimised, as that compiles in half
# the time and checks this workspace in seconds all the same.
CARGO_DENY_VERSION := 0.20.2
CARGO_DENY = $$(bash e2e/scripts/build-cargo-tool.sh cargo-deny $(CARGO_DENY_VERSION) --debug)

.PHONY: deny
deny: toolchain ## cargo deny: every dependency's license, source and version requirement against deny.toml
	@d=$(CARGO_DENY) && $$d deny check --hide-inclusion-graph licenses bans sources

.PHONY: deny-advisories
deny-advisories: toolchain ## cargo deny: RustSec advisories (fetches the advisory database from GitHub)
	@d=$(CARGO_DENY) && $$d deny check advisories

.PHONY: lint-workflows
# The hosted CI's release workflow cannot run here: actionlint checks it (its expressions, its
# actions' inputs, runner labels, and its shell scripts through shellcheck, from Debian).
ACTIONLINT_VERSION := v1.7.12
lint-workflows: ## actionlint (with shellcheck) the hosted CI's workflows in .github/workflows
	@command -v shellcheck >/dev/null || { [ "$$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null; } || \
	  { echo "lint-workflows: shellcheck is missing (apt-get install shellcheck)"; exit 1; }
	@a=$$(bash e2e/scripts/build-go-tool.sh github.com/rhysd/actionlint/cmd/actionlint $(ACTIONLINT_VERSION)) && \
	  $$a -shellcheck "$$(command -v shellcheck)" .github/workflows/*.yaml && echo "lint-workflows: .github/workflows clean"

.PHONY: fmt
fmt: ## Format the code
	$(CARGO) fmt --all

# The release binary carries the list of the crates built into it (cargo auditable: a `.dep-v0`
# section that scanners such as trivy, grype and `cargo audit bin` read); cargo-auditable is built
# once from crates.io into the cache.
CARGO_AUDITABLE_VERSION := 0.7.7
# The release's SBOM is that list as CycloneDX (auditable2cdx, from the same project).
AUDITABLE2CDX_VERSION := 0.1.0
# Panic messages name the source files of dependencies under cargo's home, which differs between
# machines: remapped, one commit gives one binary wherever it is built (paths in the checkout are
# relative already).
RELEASE_BUILD = PATH="$$(dirname "$$(bash e2e/scripts/build-cargo-tool.sh cargo-auditable $(CARGO_AUDITABLE_VERSION) --debug)"):$$PATH" \
	$(TARGET_RUSTFLAGS)="$$$(TARGET_RUSTFLAGS) --remap-path-prefix=$${CARGO_HOME:-$$HOME/.cargo}=/cargo" \
	$(CARGO) auditable build --release --locked -p cloneset-operator --bin cloneset-operator

.PHONY: image
image: toolchain ## Build the operator's OCI image (static release binary, non-root, no shell) as $(IMAGE_ARCHIVE)
	$(RELEASE_BUILD)
	$(CARGO) build -p e2e --bin local-cluster
	@$(LOCAL_CLUSTER) image --binary target/$(HOST_TRIPLE)/release/cloneset-operator --reference $(IMAGE) --out $(IMAGE_ARCHIVE)

.PHONY: deploy
# The README's install, on the local control plane: the image goes to its registry (which
# containerd serves as docker.io), the chart is installed with the image's tag and placed on the
# real nodes (tainted, so that only pods meant for them run there). HELM_ARGS adds values, e.g.
# HELM_ARGS='--set featureGates=InPlaceWorkloadVerticalScaling=true'.
HELM_ARGS ?=
deploy: image cluster-up ## Build the image, push it to the local registry and helm install the chart on the local control plane
	@[ "$(REAL_NODES)" -gt 0 ] || { echo "make deploy: the operator's pods need a real node (REAL_NODES=1, as root)"; exit 1; }
	@$(LOCAL_CLUSTER) --dir $(CLUSTER_DIR) push --archive $(IMAGE_ARCHIVE) --reference $(IMAGE)
	@kc=$$($(LOCAL_CLUSTER) --dir $(CLUSTER_DIR) status) && \
	$(CHART_RELEASE) $$kc --wait --timeout 3m \
	  --set manager.image.tag=$(VERSION) $(HELM_ARGS) \
	  --set-json 'manager.nodeSelector={"cloneset-operator.dev/real-node":"true"}' \
	  --set-json 'manager.tolerations=[{"key":"cloneset-operator.dev/real-node","operator":"Exists","effect":"NoSchedule"}]' && \
	echo "make deploy: the operator runs in namespace cloneset-system; export KUBECONFIG=$$kc"

.PHONY: dist
dist: toolchain ## A static release binary for workstations (e.g. `migrate`), with LICENSE and a checksum, in target/dist
	$(RELEASE_BUILD)
	@set -e; name=cloneset-operator-$(VERSION)-$(HOST_TRIPLE); dir=$(DIST_DIR)/$$name; \
	rm -rf $$dir; mkdir -p $$dir; \
	cp target/$(HOST_TRIPLE)/release/cloneset-operator LICENSE CHANGELOG.md $$dir/; \
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C $(DIST_DIR) -cf - $$name | gzip -n > $(DIST_DIR)/$$name.tar.gz; \
	rm -rf $$dir; \
	(cd $(DIST_DIR) && sha256sum $$name.tar.gz > $$name.tar.gz.sha256); \
	echo "make dist: $(DIST_DIR)/$$name.tar.gz ($$(cut -c1-16 $(DIST_DIR)/$$name.tar.gz.sha256)...)"

.PHONY: release
RELEASE_DIR := target/releases/$(VERSION)
release: image dist ## Everything a release of VERSION ships, in target/releases/VERSION: image archive, binary, SBOM, both charts, notes, SHA256SUMS
	@sbom=$$(bash e2e/scripts/build-cargo-tool.sh auditable2cdx $(AUDITABLE2CDX_VERSION) --debug) && \
	IMAGE_ARCHIVE=$(IMAGE_ARCHIVE) DIST_DIR=$(DIST_DIR) AUDITABLE2CDX=$$sbom bash e2e/scripts/release.sh $(VERSION) $(HOST_TRIPLE) $(RELEASE_DIR)

.PHONY: version
version: ## Print the version (Cargo.toml's), e.g. for the release workflow
	@echo $(VERSION)

.PHONY: publish
# The registry a release is published to (host/path); COSIGN_KEY names the key to sign with
# (COSIGN_PASSWORD its passphrase), unset, cosign signs keylessly (the hosted release workflow).
REGISTRY ?=
publish: ## Push target/releases/VERSION to REGISTRY: image and charts signed with cosign (COSIGN_KEY, or keyless), SBOM attested
	$(CARGO) build -p e2e --bin local-cluster
	@LOCAL_CLUSTER=$(LOCAL_CLUSTER) bash e2e/scripts/publish.sh $(RELEASE_DIR) $(VERSION) "$(REGISTRY)"

.PHONY: cluster-up
cluster-up: build cluster-toolchain ## Start the local control plane with REAL_NODES real nodes (idempotent); prints `export KUBECONFIG=...` last
	@$(LOCAL_CLUSTER) --dir $(CLUSTER_DIR) up --real-nodes $(REAL_NODES)

.PHONY: cluster-down
cluster-down: ## Stop the local control plane (logs are kept)
	@if [ -x $(LOCAL_CLUSTER) ]; then $(LOCAL_CLUSTER) --dir $(CLUSTER_DIR) down; else echo "nothing to stop"; fi

.PHONY: cluster-status
cluster-status: ## Print the local control plane's kubeconfig path if it is running
	@$(LOCAL_CLUSTER) --dir $(CLUSTER_DIR) status

.PHONY: kubernetes
kubernetes: ## Build (once) K8S_VERSION's kube-apiserver, controller-manager, scheduler, kubectl (and kubelet, kube-proxy) into the cache
	@bash e2e/scripts/build-k8s.sh

.PHONY: toolchain
toolchain:
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust with rustup (rust-toolchain.toml names the release)"; exit 1; }
	@[ -n "$(HOST_TRIPLE)" ] || { echo "rustc does not run: the Rust release rust-toolchain.toml names is missing (see above)"; exit 1; }

.PHONY: cluster-toolchain
# What the local control plane, Helm and the tests need beyond Rust.
cluster-toolchain:
	@command -v go >/dev/null || { echo "go not found: Go 1.26.x is needed to build the local control plane and Helm"; exit 1; }
	@command -v openssl >/dev/null || { echo "openssl not found: needed for the local control plane's certificates"; exit 1; }
	@command -v kubectl >/dev/null || { echo "kubectl not found"; exit 1; }

.PHONY: clean
clean: cluster-down ## Stop the local control plane and remove build output
	$(CARGO) clean
