# redis-operator. Targets follow operator-sdk (go/v4) names; `make help` lists them.

# The release. `make bundle catalog` writes it into bundle/ and catalog/.
VERSION ?= 0.2.0
# The release this one replaces in the upgrade graph, and the versions it skips to.
REPLACES ?= redis-operator.v0.1.0
SKIP_RANGE ?= >=0.1.0 <0.2.0
# The release's creation time: fixed, so that regenerating the bundle changes nothing.
CREATED_AT ?= 2026-11-30T00:00:00Z
CHANNELS ?= stable
DEFAULT_CHANNEL ?= stable

IMAGE_TAG_BASE ?= example.com/redis-operator
IMG ?= $(IMAGE_TAG_BASE):v$(VERSION)
BUNDLE_IMG ?= $(IMAGE_TAG_BASE)-bundle:v$(VERSION)
CATALOG_IMG ?= $(IMAGE_TAG_BASE)-catalog:v$(VERSION)
CONTAINER_TOOL ?= docker

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

LOCALBIN ?= $(CURDIR)/bin
# The Kubernetes binaries that envtest and the local cluster run.
ENVTEST_BIN ?= $(LOCALBIN)/k8s
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
OPM ?= $(LOCALBIN)/opm
# OLM's olm and catalog operators, and its CRDs, for the local cluster.
OLM_DIR ?= $(LOCALBIN)/olm
OLM_VERSION ?= v0.38.0
export KUBEBUILDER_ASSETS = $(ENVTEST_BIN)

# One build configuration for all that is built here (the tools, the tests, the linters, the images):
# static (CGO_ENABLED=0: the images hold no libc, and nothing here needs C) and with module paths for
# file names (-trimpath). Go's build cache keys each compiled package by it: with one configuration,
# the operator's image reuses what the tests and the linters compiled, and opm what controller-gen
# did; with two, a cold run compiled them twice (the operator's image alone took 11 minutes).
export CGO_ENABLED = 0
export GOFLAGS := $(strip $(filter-out -trimpath,$(shell go env GOFLAGS)) -trimpath)

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: admission-rules
admission-rules: ## Render spec.config's allow-list and the ACL rules' grammar (api/v1) into CEL rules on their types, and the allow-list into docs/config.md.
	go run ./hack/admissionrules > api/v1/zz_generated.admission.go.tmp
	mv api/v1/zz_generated.admission.go.tmp api/v1/zz_generated.admission.go
	go run ./hack/admissionrules blocks api/v1/rediscluster_types.go api/v1/redisbackup_types.go
	mkdir -p docs
	go run ./hack/admissionrules docs > docs/config.md

.PHONY: manifests
manifests: controller-gen admission-rules ## Generate the CRD and the RBAC role from the markers; copy the monitoring objects the operator installs into config/prometheus.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./api/...;./controllers/..." output:crd:artifacts:config=config/crd/bases
	cp internal/monitoring/servicemonitor.yaml config/prometheus/monitor.yaml
	cp internal/monitoring/prometheusrule.yaml config/prometheus/rules.yaml

.PHONY: generate
generate: controller-gen admission-rules ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

# The build tags of the suites that need more than make test gives them (each suite's make target
# says which): vet reads their files too, as the linters do (.golangci.yml's run.build-tags, which
# lists the same tags: keep the two alike).
SUITE_TAGS = e2e,faults,node,olm

.PHONY: vet
vet: ## Run go vet, on the suites' files too (SUITE_TAGS). It compiles every package the tests import, once: CI runs it before the suites that run side by side, which would otherwise each compile them.
	go vet -tags $(SUITE_TAGS) ./...

GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint

.PHONY: lint
lint: golangci-lint ## golangci-lint with .golangci.yml (errorlint, nilerr, gocognit, importas, ...).
	$(GOLANGCI_LINT) run ./...

# The test binaries are linked without DWARF (-w): each links about a fifth faster, and the 26
# packages' binaries are linked again at every run; a stack trace still names every function.
# Up to 4 tests of a package at a time (-parallel 4; controllers' tests that run Redis are
# t.Parallel): they wait on Redis and the API server far more than they use the CPU. controllers
# took 270 s alone one at a time, 157 s four at a time (2026-12-07).
.PHONY: test
test: manifests generate fmt vet envtest kustomize opm prometheus-crds versitygw bundle-validate-sdk operatorhub ## Unit tests, envtest integration tests against a real kube-apiserver, bundle and catalog validation.
	go test -ldflags=-w ./... -count=1 -parallel 4

# make bench is two halves, by what they run on: the local cluster's real node (root), or an envtest
# API server and redis-server processes. CI compiles them (make vet) and runs bench-failover only.
.PHONY: bench
bench: bench-node bench-envtest ## Benchmarks that print figures, each beside what users would otherwise run where there is one (make bench-node, then make bench-envtest). BENCH_FULL=1: also 1M keys and 10 KB values moved; BENCH_SMOKE=1: small, a quick check that each runs.

# require_commands stops a target before it starts when a reference tool it compares with is
# missing, naming the Debian package (README, "Test it"), rather than failing in the middle of a run.
define require_commands
	@for cmd in $(1); do command -v $$cmd >/dev/null || { echo "$@ needs $$cmd ($(2)): apt-get install $$( [ $$cmd = redis-cli ] && echo redis-tools || echo $$cmd )"; exit 1; }; done
endef

.PHONY: bench-node
bench-node: localcluster node redis-image ## The local cluster on its real node (root): apply-to-Ready, failover through the ClusterIP, and the node's own cost; a primary's machine powered off on three nodes until a write through the Service is accepted (p50, p95); and what maxmemory's share of a memory limit leaves under forks (a memory cgroup).
	go test ./test/bench/... -run '^$$' -bench 'LocalCluster|NodePowerOff|MaxMemoryShare' -benchtime 1x -count 1 -timeout 30m

.PHONY: bench-envtest
bench-envtest: envtest build versitygw ## On envtest and redis-server processes: 500 new RedisClusters against a plain client (three rounds, median); the operator binary idle over 1000, and checking 100 x 3 real nodes against a bare Go loop; a 1 GiB backup and restore against redis-cli --rdb piped to rclone; 3 shards' backup and restore against one node's; cluster mode's scale-out from 3 to 5 shards against redis-cli --cluster rebalance.
	$(call require_commands,rclone redis-cli,the backup benchmarks compare with them)
	go test ./test/bench/... -run '^$$' -bench 'Reconcile500|Idle1000|HealthCheck100x3|Backup1GiB|BackupShardsAgainstOne|ScaleOutShards' -benchtime 1x -count 1 -timeout 40m

FAULTS_SEED ?= 1
PARTITIONS_FULL ?=
# PARTITIONS_FULL=1 holds each cut 60 s and adds 5 minutes of random cuts per setting: 24 minutes
# here (2026-12-03), too near the short form's 30-minute limit.
PARTITIONS_TIMEOUT = $(if $(filter 1,$(PARTITIONS_FULL)),45m,30m)
# Crash points tried at once. They wait on Redis and the API server more than they use the CPU:
# 147 points take 3.5 minutes here 6 at a time, 4.1 minutes 4 at a time, and about 6 at go
# test's default of one per core.
# The scenarios share the slots, side by side: 196 points took 317 s alone (the crash test 254 s),
# from 360 to 411 s with one scenario after another (2026-12-07).
FAULTS_PARALLEL ?= 6
# FAULTS_FULL=1 is the long run: more generated specs, and each scenario's writes listed and
# crashed at three times (their order varies with timing).
ifeq ($(FAULTS_FULL),1)
FAULTS_COUNT ?= 1000
FAULTS_CRASH_ROUNDS ?= 3
endif
FAULTS_COUNT ?= 150
FAULTS_CRASH_ROUNDS ?= 1

.PHONY: test-faults
test-faults: envtest ## Fault suite on its own: the operator crashed after each of its writes; specs generated from the CRD's schema (FAULTS_SEED, FAULTS_COUNT, FAULTS_FULL=1).
	go test -tags faults ./test/faults/... -count 1 -timeout 60m -v -parallel $(FAULTS_PARALLEL) -args -faults.seed=$(FAULTS_SEED) -faults.count=$(FAULTS_COUNT) -faults.crash-rounds=$(FAULTS_CRASH_ROUNDS) -faults.crash-parallel=$(FAULTS_PARALLEL)

.PHONY: bench-failover
bench-failover: ## Failover time with real redis-server processes: p50 and p95 over 12 rounds.
	go test ./test/bench/... -run '^$$' -bench Failover -benchtime 1x -count 1 -timeout 10m

.PHONY: test-node
test-node: node redis-image ## The real node (root): the images in containerd, a pod on the kubelet, make demo on the real node and its Ctrl-C, two clusters on one machine. One package at a time: the packages' own tests compare the whole machine before and after.
	go test -tags node -p 1 ./test/node/... ./test/localcluster/... -count=1 -timeout 20m -v

# The end-to-end stories come in two halves, each on a local cluster of its own: what users do
# and see (make test-e2e: the lifecycle, restarts, memory, clients outside), and the failures of
# machines and networks (make test-e2e-failures: nodes losing power, frozen, drained; network
# partitions). Each has its own time limit: together they took 28 to 31 minutes, past one
# 30-minute limit (2026-12-06). Two local clusters can share the machine (test/node/tenants.go);
# CI runs the halves one after the other (.ci/run says why).
E2E_FAILURES = ^Test(Drain|NodeLoss|Machines|Placement|Partition)
# Stories of make test-e2e that run side by side once the lifecycle has run alone
# (besideOtherStories in test/e2e says which may).
E2E_PARALLEL ?= 3

.PHONY: test-e2e
test-e2e: localcluster node redis-image versitygw ## End-to-end on the local cluster's real nodes (root): the operator from its image as the CSV's Deployment, Redis's image, kubectl; the lifecycle, restarts, memory limits, clients outside the cluster (make test-e2e-failures: the rest). E2E_KUBECONFIG=<file> [IMG=<operator image>]: on that cluster instead.
	E2E_KUBECONFIG=$(E2E_KUBECONFIG) IMG=$(IMG) go test -tags e2e ./test/e2e/... -skip '$(E2E_FAILURES)' -parallel $(E2E_PARALLEL) -count=1 -timeout 30m -v

.PHONY: test-e2e-failures
test-e2e-failures: localcluster node redis-image versitygw ## End-to-end failures on the local cluster's real nodes (root): machines losing power, frozen and drained, and network partitions under a workload (make test-partitions: those alone); fails on any acknowledged write lost. E2E_KUBECONFIG=<file> [IMG=<operator image>]: on that cluster instead.
	E2E_KUBECONFIG=$(E2E_KUBECONFIG) IMG=$(IMG) go test -tags e2e ./test/e2e/... -run '$(E2E_FAILURES)' -count=1 -timeout 30m -v

.PHONY: test-partitions
test-partitions: localcluster node redis-image ## Network partitions alone (make test-e2e-failures runs them too, on its cluster), on the local cluster's real node (root): cuts between the operator, the primary, the replicas and the API server under a workload of clients; fails on any acknowledged write lost. PARTITIONS_FULL=1: longer cuts.
	PARTITIONS_FULL=$(PARTITIONS_FULL) go test -tags e2e ./test/e2e/... -run '^TestPartition' -count=1 -timeout $(PARTITIONS_TIMEOUT) -v

.PHONY: demo
NODES ?= 1
demo: node redis-image ## Start a local cluster on real nodes (root; NODES=3 for three, each in a zone of its own), run the operator from its image, apply the sample and show it working; Ctrl-C ends it.
	go run ./test/localcluster/cmd/localcluster --nodes $(NODES)

.PHONY: demo-olm
demo-olm: localcluster node redis-image olm opm grpc-health-probe operator-sdk ## make demo with OLM: OLM installs the operator from catalog/ (add DEMO_ARGS=--olm-only to install nothing, for make run-bundle).
	go run ./test/localcluster/cmd/localcluster $(or $(DEMO_ARGS),--olm)

.PHONY: verify
verify: manifests generate fmt bundle catalog ## Regenerate everything and gofmt; fails when that changes the tree.
	@if [ -n "$$(git status --porcelain)" ]; then \
		echo "generated files are stale; run make manifests generate and commit:"; \
		git status --porcelain; git --no-pager diff; exit 1; \
	fi

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the manager binary.
	go build -o bin/manager ./cmd

.PHONY: run
run: manifests generate fmt vet ## Run the manager from your host against the cluster in your kubeconfig.
	go run ./cmd

.PHONY: docker-build
docker-build: ## Build the manager image: with $(CONTAINER_TOOL) when its engine answers, otherwise without an engine (make operator-image).
	@if command -v $(CONTAINER_TOOL) >/dev/null && $(CONTAINER_TOOL) info >/dev/null 2>&1; then \
		$(CONTAINER_TOOL) build -t $(IMG) . ; \
	else \
		echo "No $(CONTAINER_TOOL) engine answers: building $(IMG) without one, into $(IMAGES_DIR)/operator (an OCI layout)"; \
		$(MAKE) operator-image; \
	fi

.PHONY: docker-push
docker-push: ## Push the manager image: with $(CONTAINER_TOOL) when its engine answers, otherwise to the local cluster's registry (make demo-olm).
	$(call push_image,$(IMG),$(IMAGES_DIR)/operator)

# push_image pushes image $(1) with $(CONTAINER_TOOL) when its engine answers; otherwise the OCI layout
# $(2) that the matching *-build target wrote, to the registry of the local cluster in KUBECONFIG.
define push_image
	@if command -v $(CONTAINER_TOOL) >/dev/null && $(CONTAINER_TOOL) info >/dev/null 2>&1; then \
		$(CONTAINER_TOOL) push $(1) ; \
	else \
		echo "No $(CONTAINER_TOOL) engine answers: pushing $(2) to the registry of the local cluster in KUBECONFIG (make demo-olm)"; \
		go run ./test/localcluster/cmd/pushimage --dir $(2) --name $(1); \
	fi
endef

##@ Images without a container engine (test/images): OCI layouts under bin/images

IMAGES_DIR ?= $(LOCALBIN)/images
# The sandbox image the node's CRI starts first.
PAUSE_IMG ?= registry.k8s.io/pause:3.10
# The Redis image: Debian's redis-server on Debian's root filesystem. The harness tags it as every
# version the tests ask for (test/images.RedisVersions).
REDIS_IMG ?= docker.io/library/redis:7.2

.PHONY: images
images: operator-image pause-image redis-image ## The local node's images: the operator's, pause and Redis.

.PHONY: operator-image
operator-image: ## The operator's image as Dockerfile describes it, built without an engine: $(IMAGES_DIR)/operator.
	mkdir -p $(IMAGES_DIR)
	go build -ldflags="-s -w" -o $(IMAGES_DIR)/manager ./cmd
	go run ./test/images/cmd/build-image operator -binary $(IMAGES_DIR)/manager -name $(IMG) -out $(IMAGES_DIR)/operator

.PHONY: pause-image
pause-image: ## The pause image: $(IMAGES_DIR)/pause.
	mkdir -p $(IMAGES_DIR)
	go build -ldflags="-s -w" -o $(IMAGES_DIR)/pause-binary ./test/images/pause
	go run ./test/images/cmd/build-image pause -binary $(IMAGES_DIR)/pause-binary -name $(PAUSE_IMG) -out $(IMAGES_DIR)/pause

# Debootstrap downloads Debian's packages each time: the image is also kept in the user's cache,
# under the hash of what makes it, so that a fresh clone (CI) copies it instead.
IMAGES_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/redis-operator/images
REDIS_IMAGE_KEY = $(shell cat hack/redis-rootfs.sh test/images/images.go | sha256sum | cut -c1-16)

.PHONY: redis-image
redis-image: $(IMAGES_DIR)/redis/index.json ## The Redis image from Debian's packages (debootstrap; root): $(IMAGES_DIR)/redis.
$(IMAGES_DIR)/redis/index.json: hack/redis-rootfs.sh test/images/images.go
	mkdir -p $(IMAGES_DIR) $(IMAGES_CACHE)
	if [ -f $(IMAGES_CACHE)/redis-$(REDIS_IMAGE_KEY)/index.json ]; then \
		rm -rf $(IMAGES_DIR)/redis && cp -r $(IMAGES_CACHE)/redis-$(REDIS_IMAGE_KEY) $(IMAGES_DIR)/redis; \
	else \
		hack/redis-rootfs.sh $(IMAGES_DIR)/redis-rootfs && \
		go run ./test/images/cmd/build-image redis -rootfs $(IMAGES_DIR)/redis-rootfs -name $(REDIS_IMG) -out $(IMAGES_DIR)/redis && \
		rm -rf $(IMAGES_DIR)/redis-rootfs && \
		rm -rf $(IMAGES_CACHE)/redis-$(REDIS_IMAGE_KEY) && cp -r $(IMAGES_DIR)/redis $(IMAGES_CACHE)/redis-$(REDIS_IMAGE_KEY); \
	fi
	touch $@

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: manifests kustomize ## Install the CRD into the cluster in your kubeconfig.
	$(KUSTOMIZE) build config/crd | kubectl apply --server-side -f -

.PHONY: uninstall
uninstall: manifests kustomize ## Remove the CRD (and every RedisCluster) from the cluster.
	$(KUSTOMIZE) build config/crd | kubectl delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: deploy
deploy: manifests kustomize ## Deploy the operator to the cluster.
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default | kubectl apply --server-side -f -

.PHONY: undeploy
undeploy: kustomize ## Remove the operator from the cluster.
	$(KUSTOMIZE) build config/default | kubectl delete --ignore-not-found=$(ignore-not-found) -f -

##@ OLM

# `make bundle` is operator-sdk's scaffold: `generate kustomize manifests` refreshes the CSV base
# (config/manifests/bases) from the API's +operator-sdk:csv markers, `generate bundle` writes
# bundle/ and bundle.Dockerfile, `bundle validate` checks them. Then cmd/olm-gen finishes what
# the CLI cannot know (internal/olm FinishBundle): the release's fixed createdAt (the CLI writes
# the clock's, so make verify would never hold), replaces, skipRange, icon, the operator image in
# relatedImages, the namespaced rules as permissions (the CLI makes every ClusterRole rule a
# cluster permission, which would grant an operator installed for one namespace rights in all),
# and the com.redhat.openshift.versions label OpenShift's catalog asks for.
BUNDLE_GEN_FLAGS ?= -q --overwrite --version $(VERSION) --channels $(CHANNELS) --default-channel $(DEFAULT_CHANNEL)
BUNDLE_FINISH = go run ./cmd/olm-gen bundle --version $(VERSION) --image $(IMG) \
	--replaces "$(REPLACES)" --skip-range "$(SKIP_RANGE)" --created-at $(CREATED_AT)

.PHONY: bundle
bundle: manifests kustomize operator-sdk ## Generate the bundle (CSV, CRDs, metadata, scorecard config) and bundle.Dockerfile with operator-sdk, then validate it.
	$(OPERATOR_SDK) generate kustomize manifests -q --interactive=false
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	rm -rf bundle
	$(KUSTOMIZE) build config/manifests | $(OPERATOR_SDK) generate bundle $(BUNDLE_GEN_FLAGS)
	$(BUNDLE_FINISH)
	$(OPERATOR_SDK) bundle validate ./bundle

# A release for disconnected clusters names every image by digest. bundle/ (committed) names
# them by tag, as a developer's cluster pulls them.
PINNED_DIR ?= $(IMAGES_DIR)/pinned

.PHONY: bundle-pinned
bundle-pinned: bundle operator-image redis-image ## The bundle with every image named by the digest of the image built here (features.operators.openshift.io/disconnected "true"), into $(PINNED_DIR); make bundle-build BUNDLE_ROOT=$(PINNED_DIR) builds its image.
	rm -rf $(PINNED_DIR) && mkdir -p $(PINNED_DIR) && cp -r bundle bundle.Dockerfile $(PINNED_DIR)/
	$(BUNDLE_FINISH) --root $(PINNED_DIR) --pin-images $(IMAGES_DIR)/operator,$(IMAGES_DIR)/redis
	$(OPERATOR_SDK) bundle validate $(PINNED_DIR)/bundle

# Where bundle-build finds bundle/ and bundle.Dockerfile: the repository, or $(PINNED_DIR).
BUNDLE_ROOT ?= .

.PHONY: bundle-build
bundle-build: ## Build the bundle image: with $(CONTAINER_TOOL) when its engine answers, otherwise without an engine, as bundle.Dockerfile says, into $(IMAGES_DIR)/bundle (an OCI layout).
	@if command -v $(CONTAINER_TOOL) >/dev/null && $(CONTAINER_TOOL) info >/dev/null 2>&1; then \
		$(CONTAINER_TOOL) build -f $(BUNDLE_ROOT)/bundle.Dockerfile -t $(BUNDLE_IMG) $(BUNDLE_ROOT) ; \
	else \
		echo "No $(CONTAINER_TOOL) engine answers: building $(BUNDLE_IMG) from $(BUNDLE_ROOT) without one, into $(IMAGES_DIR)/bundle"; \
		go run ./test/images/cmd/build-image bundle -root $(BUNDLE_ROOT) -name $(BUNDLE_IMG) -out $(IMAGES_DIR)/bundle; \
	fi

.PHONY: bundle-push
bundle-push: ## Push the bundle image: with $(CONTAINER_TOOL) when its engine answers, otherwise to the local cluster's registry (make demo-olm).
	$(call push_image,$(BUNDLE_IMG),$(IMAGES_DIR)/bundle)

.PHONY: catalog
catalog: opm ## Render the file-based catalog from config/catalog/template.yaml and the bundle.
	go run ./cmd/olm-gen catalog --opm $(OPM) --bundle-image $(BUNDLE_IMG)

# A release's pull requests to the community catalogs (docs/olm.md, "Submitting a release"):
# OperatorHub.io's (k8s-operatorhub/community-operators) and OpenShift's
# (redhat-openshift-ecosystem/community-operators-prod, its file-based catalog workflow).
OPERATORHUB_DIR ?= $(LOCALBIN)/operatorhub
OPERATORHUB_REVIEWERS ?= redis-operator-maintainers
OPENSHIFT_NEWEST ?= v4.21

.PHONY: operatorhub
operatorhub: ## Write the release's submissions to OperatorHub.io's and OpenShift's community catalogs into $(OPERATORHUB_DIR) (make test checks them as their pipelines do).
	go run ./cmd/olm-gen operatorhub --out $(OPERATORHUB_DIR) --reviewers $(OPERATORHUB_REVIEWERS) --openshift-newest $(OPENSHIFT_NEWEST)

.PHONY: bundle-validate-sdk
bundle-validate-sdk: operator-sdk ## operator-sdk bundle validate as OperatorHub's pipeline runs it (name=operatorhub, suite=operatorframework): no error, no warning, and a broken copy flagged (internal/olm).
	go test ./internal/olm -run '^TestOperatorSDK' -count=1

# The multiarch validator inspects each image of the CSV with a container engine's CLI (docker
# pull, docker manifest inspect); none runs here, so test/images/cmd/docker answers those two
# commands from the images built here (IMAGES_DIR), under the name docker, on PATH for it alone.
.PHONY: bundle-validate-multiarch
bundle-validate-multiarch: operator-sdk operator-image redis-image ## operator-sdk bundle validate --select-optional name=multiarch against the images built here: no error, no warning.
	go build -o $(LOCALBIN)/engine-standin/docker ./test/images/cmd/docker
	@out=$$(PATH=$(LOCALBIN)/engine-standin:$$PATH IMAGES_DIR=$(IMAGES_DIR) $(OPERATOR_SDK) bundle validate ./bundle --select-optional name=multiarch 2>&1); status=$$?; echo "$$out"; \
	if [ $$status -ne 0 ] || echo "$$out" | grep -q 'level=\(warning\|error\)'; then echo "bundle-validate-multiarch: the pipeline would flag the bundle"; exit 1; fi

.PHONY: catalog-validate
catalog-validate: opm ## Validate the catalog with opm.
	$(OPM) validate catalog

.PHONY: catalog-build
catalog-build: opm grpc-health-probe ## Build the catalog image (opm serving catalog/, its cache built in): with $(CONTAINER_TOOL) when its engine answers, otherwise without an engine, on the opm built here, into $(IMAGES_DIR)/catalog.
	@if command -v $(CONTAINER_TOOL) >/dev/null && $(CONTAINER_TOOL) info >/dev/null 2>&1; then \
		$(CONTAINER_TOOL) build -f catalog.Dockerfile -t $(CATALOG_IMG) . ; \
	else \
		echo "No $(CONTAINER_TOOL) engine answers: building $(CATALOG_IMG) without one, into $(IMAGES_DIR)/catalog"; \
		go run ./test/images/cmd/build-image catalog -root . -opm $(OPM) -health-probe $(GRPC_HEALTH_PROBE) -name $(CATALOG_IMG) -out $(IMAGES_DIR)/catalog; \
	fi

.PHONY: catalog-push
catalog-push: ## Push the catalog image: with $(CONTAINER_TOOL) when its engine answers, otherwise to the local cluster's registry (make demo-olm).
	$(call push_image,$(CATALOG_IMG),$(IMAGES_DIR)/catalog)

# operator-sdk scorecard runs each test of the bundle's tests/scorecard/config.yaml in a pod: the
# SDK's built-in tests in its scorecard-test image, ours (redis-operator-scorecard: they test the
# operator, which the built-in ones do not) in an image of our own; both built here and in the
# local cluster's registry, as is busybox, the untar init container's image here. Our tests create
# and read RedisClusters: their ServiceAccount gets a Role for it.
SCORECARD_NAMESPACE ?= default
SCORECARD_SERVICE_ACCOUNT ?= redis-operator-scorecard
SCORECARD_ARGS ?=
KUBECTL ?= $(ENVTEST_BIN)/kubectl

.PHONY: scorecard
scorecard: scorecard-run ## Run the scorecard (make scorecard-run).

.PHONY: scorecard-run
scorecard-run: operator-sdk ## operator-sdk scorecard of BUNDLE_DIR (bundle) on the local cluster of make demo-olm (SCORECARD_ARGS="-o json", "--selector suite=olm").
	$(KUBECTL) -n $(SCORECARD_NAMESPACE) create serviceaccount $(SCORECARD_SERVICE_ACCOUNT) --dry-run=client -o yaml | $(KUBECTL) apply -f -
	$(KUBECTL) -n $(SCORECARD_NAMESPACE) create role $(SCORECARD_SERVICE_ACCOUNT) --verb=get,list,watch,create,delete \
		--resource=redisclusters.cache.example.com --dry-run=client -o yaml | $(KUBECTL) apply -f -
	$(KUBECTL) -n $(SCORECARD_NAMESPACE) create role $(SCORECARD_SERVICE_ACCOUNT)-read --verb=get,list,watch \
		--resource=pods,services,configmaps --dry-run=client -o yaml | $(KUBECTL) apply -f -
	for role in $(SCORECARD_SERVICE_ACCOUNT) $(SCORECARD_SERVICE_ACCOUNT)-read; do \
		$(KUBECTL) -n $(SCORECARD_NAMESPACE) create rolebinding $$role --role=$$role \
			--serviceaccount=$(SCORECARD_NAMESPACE):$(SCORECARD_SERVICE_ACCOUNT) --dry-run=client -o yaml | $(KUBECTL) apply -f - || exit 1; \
	done
	$(OPERATOR_SDK) scorecard $(or $(BUNDLE_DIR),bundle) --namespace $(SCORECARD_NAMESPACE) --service-account $(SCORECARD_SERVICE_ACCOUNT) \
		--untar-image $(SDK_INIT_IMG) --pod-security restricted --wait-time 10m $(SCORECARD_ARGS)

##@ Tools (built from pinned tools modules under hack/tools, cached in bin/)

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN): hack/tools/gen/go.mod hack/tools/gen/go.sum
	hack/build-tool.sh $(LOCALBIN)/ hack/tools/gen sigs.k8s.io/controller-tools/cmd/controller-gen

# The Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, generated from its API types
# (pinned in hack/tools/prometheus-crds): the tests install them.
PROMETHEUS_CRDS ?= $(LOCALBIN)/prometheus-crds
.PHONY: prometheus-crds
prometheus-crds: $(PROMETHEUS_CRDS)/monitoring.coreos.com_servicemonitors.yaml
$(PROMETHEUS_CRDS)/monitoring.coreos.com_servicemonitors.yaml: $(CONTROLLER_GEN) hack/tools/prometheus-crds/go.mod hack/tools/prometheus-crds/go.sum
	rm -rf $(PROMETHEUS_CRDS).tmp && mkdir -p $(PROMETHEUS_CRDS).tmp $(PROMETHEUS_CRDS)
	cd hack/tools/prometheus-crds && $(CONTROLLER_GEN) crd:crdVersions=v1,maxDescLen=0 \
		paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 output:crd:dir=$(PROMETHEUS_CRDS).tmp
	cp $(PROMETHEUS_CRDS).tmp/monitoring.coreos.com_prometheusrules.yaml $(PROMETHEUS_CRDS).tmp/monitoring.coreos.com_servicemonitors.yaml $(PROMETHEUS_CRDS)/
	rm -rf $(PROMETHEUS_CRDS).tmp

# The Versity S3 Gateway (versitygw, Apache-2.0): the real S3 server the backup tests store in.
GRPC_HEALTH_PROBE ?= $(LOCALBIN)/grpc_health_probe
.PHONY: grpc-health-probe
grpc-health-probe: $(GRPC_HEALTH_PROBE) ## Build grpc_health_probe (bin/): the probe of OLM's registry pods, which the opm image carries.
$(GRPC_HEALTH_PROBE): hack/tools/grpc-health-probe/go.mod hack/tools/grpc-health-probe/go.sum
	hack/build-tool.sh $(GRPC_HEALTH_PROBE) hack/tools/grpc-health-probe github.com/grpc-ecosystem/grpc-health-probe

# Rancher's local-path-provisioner (Apache-2.0): the local cluster's volumes, each on one node.
LOCAL_PATH_PROVISIONER ?= $(LOCALBIN)/local-path-provisioner
.PHONY: local-path-provisioner
local-path-provisioner: $(LOCAL_PATH_PROVISIONER) ## Build Rancher's local-path-provisioner v0.0.30 (bin/): the default StorageClass's provisioner on the local cluster.
$(LOCAL_PATH_PROVISIONER): hack/tools/local-path-provisioner/go.mod hack/tools/local-path-provisioner/go.sum
	hack/build-tool.sh $(LOCAL_PATH_PROVISIONER) hack/tools/local-path-provisioner github.com/rancher/local-path-provisioner

# The operator-sdk CLI v1.42.3 and its scorecard-test image's binary, from the pinned module (its
# ansible plugin a stand-in: hack/tools/operator-sdk/ansible-operator-plugins), linked as its
# Makefile links them: static, with its version and the scorecard-test image it names.
OPERATOR_SDK_VERSION = v1.42.3
OPERATOR_SDK ?= $(LOCALBIN)/operator-sdk
SCORECARD_TEST ?= $(LOCALBIN)/scorecard-test
SDK_VERSION_PKG = github.com/operator-framework/operator-sdk/internal/version
.PHONY: operator-sdk
operator-sdk: $(OPERATOR_SDK) ## Build the operator-sdk CLI $(OPERATOR_SDK_VERSION) and scorecard-test (bin/): what users run to validate, run and score a bundle.
$(OPERATOR_SDK): hack/tools/operator-sdk/go.mod hack/tools/operator-sdk/go.sum $(shell find hack/tools/operator-sdk/ansible-operator-plugins -type f)
	CGO_ENABLED=0 hack/build-tool.sh $(LOCALBIN)/ hack/tools/operator-sdk -tags containers_image_openpgp \
		-ldflags "-s -w -X $(SDK_VERSION_PKG).Version=$(OPERATOR_SDK_VERSION) -X $(SDK_VERSION_PKG).GitVersion=$(OPERATOR_SDK_VERSION) -X $(SDK_VERSION_PKG).KubernetesVersion=v1.33.1 -X $(SDK_VERSION_PKG).ImageVersion=$(OPERATOR_SDK_VERSION)" \
		github.com/operator-framework/operator-sdk/cmd/operator-sdk github.com/operator-framework/operator-sdk/images/scorecard-test

VERSITYGW ?= $(LOCALBIN)/versitygw
.PHONY: versitygw
versitygw: $(VERSITYGW) ## Build the Versity S3 Gateway (bin/versitygw): the S3 server of the backup tests.
$(VERSITYGW): hack/tools/versitygw/go.mod hack/tools/versitygw/go.sum
	hack/build-tool.sh $(LOCALBIN)/ hack/tools/versitygw github.com/versity/versitygw/cmd/versitygw

.PHONY: kustomize
kustomize: $(KUSTOMIZE)
$(KUSTOMIZE): hack/tools/kustomize/go.mod hack/tools/kustomize/go.sum
	hack/build-tool.sh $(LOCALBIN)/ hack/tools/kustomize sigs.k8s.io/kustomize/kustomize/v5

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT): hack/tools/lint/go.mod hack/tools/lint/go.sum
	hack/build-tool.sh $(LOCALBIN)/ hack/tools/lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: opm
opm: $(OPM)
$(OPM): hack/tools/gen/go.mod hack/tools/gen/go.sum
	hack/build-tool.sh $(LOCALBIN)/ hack/tools/gen -tags containers_image_openpgp github.com/operator-framework/operator-registry/cmd/opm

.PHONY: envtest
envtest: $(ENVTEST_BIN)/kube-apiserver $(ENVTEST_BIN)/etcd ## Build kube-apiserver and etcd (v1.37.2, v3.6.16) into bin/k8s: what make test needs.

.PHONY: localcluster
localcluster: envtest $(ENVTEST_BIN)/kubectl ## Also build kube-controller-manager, kube-scheduler and kubectl: what the local cluster needs.

# The version the Kubernetes binaries report (kubectl version, the API server's /version), as a
# release build stamps it: OLM compares a CSV's minKubeVersion with it. Without a symbol table and
# DWARF (-s -w), as a release build links them (and as hack/build-tool.sh links the other tools).
K8S_VERSION = v1.37.2
K8S_VERSION_LDFLAGS = -s -w $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(pkg).gitVersion=$(K8S_VERSION) -X $(pkg).gitMajor=1 -X $(pkg).gitMinor=37 \
	-X $(pkg).gitTreeState=clean -X $(pkg).buildDate=2026-01-01T00:00:00Z)

$(ENVTEST_BIN)/kube-apiserver: hack/tools/k8s/go.mod hack/tools/k8s/go.sum
	hack/build-tool.sh $(ENVTEST_BIN)/ hack/tools/k8s -ldflags "$(K8S_VERSION_LDFLAGS)" k8s.io/kubernetes/cmd/kube-apiserver

# The Kubernetes binaries build one make rule after another, even under make -j: they share most of
# their packages, which two go builds at once would each compile (order-only prerequisites).
$(ENVTEST_BIN)/kubectl: hack/tools/k8s/go.mod hack/tools/k8s/go.sum | $(ENVTEST_BIN)/kube-apiserver
	hack/build-tool.sh $(ENVTEST_BIN)/ hack/tools/k8s -ldflags "$(K8S_VERSION_LDFLAGS)" k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
	# grep reads all of it: with -q it would stop at the match, and kubectl, cut off, fails the pipe (pipefail).
	$(ENVTEST_BIN)/kubectl version --client | grep '$(K8S_VERSION)' >/dev/null

# MetalLB v0.14.9 (Apache-2.0): the local cluster's load balancer (L2 mode), for LoadBalancer Services.
METALLB ?= $(LOCALBIN)/metallb
.PHONY: metallb
metallb: $(METALLB)/controller ## Build MetalLB v0.14.9's controller and speaker (bin/metallb/): LoadBalancer addresses on the local cluster.
$(METALLB)/controller: hack/tools/metallb/go.mod hack/tools/metallb/go.sum
	hack/build-tool.sh $(METALLB)/ hack/tools/metallb go.universe.tf/metallb/controller go.universe.tf/metallb/speaker

.PHONY: node
node: localcluster $(ENVTEST_BIN)/kubelet $(LOCAL_PATH_PROVISIONER) $(METALLB)/controller ## Also build the kubelet, kube-proxy and the volume provisioner: the local cluster's real nodes (with Debian's containerd and runc).

$(ENVTEST_BIN)/kubelet: hack/tools/k8s/go.mod hack/tools/k8s/go.sum | $(ENVTEST_BIN)/kubectl
	hack/build-tool.sh $(ENVTEST_BIN)/ hack/tools/k8s -ldflags "$(K8S_VERSION_LDFLAGS)" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
	$(ENVTEST_BIN)/kubelet --version | grep '$(K8S_VERSION)' >/dev/null

.PHONY: olm
olm: $(OLM_DIR)/olm $(OLM_DIR)/cpb ## Build OLM's olm and catalog operators ($(OLM_VERSION)), and cpb (what its bundle unpack Jobs copy a bundle with), and copy its CRDs into bin/olm.
$(OLM_DIR)/cpb: hack/tools/olm/go.mod hack/tools/olm/go.sum
	hack/build-tool.sh $(OLM_DIR)/cpb hack/tools/olm github.com/operator-framework/operator-lifecycle-manager/util/cpb
$(OLM_DIR)/olm: hack/tools/olm/go.mod hack/tools/olm/go.sum
	mkdir -p $(OLM_DIR)/crds
	hack/build-tool.sh $(OLM_DIR)/ hack/tools/olm github.com/operator-framework/operator-lifecycle-manager/cmd/olm github.com/operator-framework/operator-lifecycle-manager/cmd/catalog
	cp "$$(cd hack/tools/olm && go list -m -f '{{.Dir}}' github.com/operator-framework/operator-lifecycle-manager)"/deploy/chart/crds/*.yaml $(OLM_DIR)/crds/
	chmod u+w $(OLM_DIR)/crds/*.yaml

OLMV1_DIR ?= $(LOCALBIN)/olmv1
.PHONY: olmv1
olmv1: $(OLMV1_DIR)/operator-controller ## Build OLM v1: operator-controller and catalogd (operator-controller v1.11.0; boxcutter, which the proxy here refuses, from hack/tools/olmv1/boxcutter), and copy their CRDs into bin/olmv1.
$(OLMV1_DIR)/operator-controller: hack/tools/olmv1/go.mod hack/tools/olmv1/go.sum $(shell find hack/tools/olmv1/boxcutter -type f)
	mkdir -p $(OLMV1_DIR)/crds
	hack/build-tool.sh $(OLMV1_DIR)/ hack/tools/olmv1 -tags containers_image_openpgp github.com/operator-framework/operator-controller/cmd/operator-controller github.com/operator-framework/operator-controller/cmd/catalogd
	cp "$$(cd hack/tools/olmv1 && go list -m -f '{{.Dir}}' github.com/operator-framework/operator-controller)"/helm/olmv1/base/*/crd/standard/*.yaml $(OLMV1_DIR)/crds/
	chmod u+w $(OLMV1_DIR)/crds/*.yaml

$(ENVTEST_BIN)/etcd: hack/tools/etcd/go.mod hack/tools/etcd/go.sum
	hack/build-tool.sh $(ENVTEST_BIN)/etcd hack/tools/etcd go.etcd.io/etcd/server/v3

# make run-bundle and friends run the operator-sdk CLI against the local cluster of make demo-olm
# (export the KUBECONFIG it prints). The CLI pulls the bundle image and the index image itself:
# the index image over HTTPS whatever --use-http says (v1.42.3 reads its labels so, fbcutil.IsFBC),
# so both are named at the cluster's registry over HTTPS (test/localcluster/cmd/tlsregistry prints
# its address and writes its certificate), which the CLI trusts through SSL_CERT_FILE and the
# nodes through their containerd's hosts.toml. The index image is an empty one of opm's built
# here (the CLI's default, quay.io/operator-framework/opm:latest, is pulled from quay.io), and
# the registry pod's init container runs busybox (built here from Debian's busybox-static) where
# the CLI's default names ubi9.
RUN_BUNDLE_NAMESPACE ?= default
# The operator watches the namespace it is installed in (the CLI's default is AllNamespaces when
# the CSV supports it): RUN_BUNDLE_INSTALL_MODE=AllNamespaces for all.
RUN_BUNDLE_INSTALL_MODE ?= OwnNamespace
RUN_BUNDLE_INDEX_IMG ?= example.com/empty-index:v1.73.0
SDK_INIT_IMG ?= docker.io/library/busybox:1.35
SDK_REGISTRY_CA = $(LOCALBIN)/local-registry-ca.crt
# The shell's words that run operator-sdk against the local cluster's registry ($$registry).
sdk_with_registry = registry=$$(go run ./test/localcluster/cmd/tlsregistry --ca-file $(SDK_REGISTRY_CA)) && SSL_CERT_FILE=$(SDK_REGISTRY_CA) $(OPERATOR_SDK)

.PHONY: run-bundle
run-bundle: operator-sdk ## operator-sdk run bundle BUNDLE_IMG (make bundle-build bundle-push) on the local cluster: OLM installs it from a registry pod serving a catalog of it.
	$(sdk_with_registry) run bundle $$registry/$(BUNDLE_IMG) --index-image $$registry/$(RUN_BUNDLE_INDEX_IMG) \
		--decompression-image $$registry/$(SDK_INIT_IMG) --install-mode $(RUN_BUNDLE_INSTALL_MODE) --namespace $(RUN_BUNDLE_NAMESPACE) --timeout 5m

.PHONY: run-bundle-upgrade
run-bundle-upgrade: operator-sdk ## operator-sdk run bundle-upgrade BUNDLE_IMG: add it to that catalog and upgrade to it.
	$(sdk_with_registry) run bundle-upgrade $$registry/$(BUNDLE_IMG) --namespace $(RUN_BUNDLE_NAMESPACE) --timeout 5m

.PHONY: cleanup-bundle
cleanup-bundle: operator-sdk ## operator-sdk cleanup, keeping the CRDs and every RedisCluster: remove the Subscription, CSVs, catalog and OperatorGroup.
	$(OPERATOR_SDK) cleanup redis-operator --delete-all=false --delete-operator-groups --namespace $(RUN_BUNDLE_NAMESPACE) --timeout 2m

.PHONY: test-olm
test-olm: localcluster node redis-image olm olmv1 opm grpc-health-probe prometheus-crds operator-sdk bundle-validate-multiarch ## OLM v0 and v1 install, upgrade and remove the operator on the local cluster's real node from its images (root; catalog, run-bundle, install modes, scorecard, ClusterExtension).
	go test -tags olm ./test/olm/... -count=1 -timeout 20m -v
