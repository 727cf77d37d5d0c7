# Build, test and lint provider_health_exporter. Tools (promu, staticcheck) are pinned in the
# separate tools module (tools/go.mod) and run through `go tool`, so nothing needs installing
# beyond Go itself and the tools never enter the exporter's own go.mod.

# `sudo make demo` runs with sudo's secure_path, which leaves out /usr/local/go/bin, where Go's
# own installer puts go: look there too, and put the go found first on PATH, so the scripts and
# programs run below (scripts/build-kube.sh, the demo launcher) run the same go.
ifeq ($(origin GO),undefined)
GO       := $(or $(shell command -v go 2>/dev/null),$(wildcard /usr/local/go/bin/go),go)
endif
ifneq ($(filter /%,$(GO)),)
export PATH := $(patsubst %/,%,$(dir $(GO))):$(PATH)
endif
GOTOOL   := $(GO) tool -modfile=tools/go.mod
# promu built for this machine, for recipes that set GOOS and GOARCH for the exporter's build
# (`go tool` would build promu itself for that platform): `go tool -n` builds it and prints its path.
PROMU    := "$$($(GOTOOL) -n promu)"
BINARY   := provider_health_exporter
PKGS     := ./...

.PHONY: all build generate test test-unit test-mixin test-deps test-env kube-binaries vcsim-binary prom-binaries mixin bench fuzz fuzz-short lint vet fmt-check staticcheck fmt clean demo soak cluster kube-node-binaries
.PHONY: docker docker-binary deploy-rules helm-binary crossbuild tarballs image image-test

## all (the default goal): lint, the unit tests and the build; it installs nothing and needs no root.
all: lint test-unit build

## build: the binary, with version information, through promu (see .promu.yml).
build:
	$(GOTOOL) promu build --prefix .

## docker: the container image $(DOCKER_IMAGE):$(DOCKER_IMAGE_TAG) (see Dockerfile), from the
## binary promu builds for linux/$(DOCKER_ARCH) into .build/linux-$(DOCKER_ARCH)/. Needs a Docker engine.
DOCKER_ARCH      ?= $(shell $(GO) env GOARCH)
DOCKER_IMAGE     ?= provider-health-exporter
DOCKER_IMAGE_TAG ?= v$(shell cat VERSION)
docker-binary:
	GOOS=linux GOARCH=$(DOCKER_ARCH) CGO_ENABLED=0 $(PROMU) build --prefix .build/linux-$(DOCKER_ARCH)
docker: docker-binary
	docker build -t "$(DOCKER_IMAGE):$(DOCKER_IMAGE_TAG)" --build-arg ARCH="$(DOCKER_ARCH)" --build-arg OS=linux .

# The project's repository: the image's org.opencontainers.image.source, the SBOM's namespace.
SOURCE_URL ?= https://github.com/provider-health-exporter/provider-health-exporter
# The time of the crossbuild's build date and of every time stamp in the image: the commit's.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || date +%s)

## crossbuild: the binary for every platform of PLATFORMS into .build/<os>-<arch><variant>/, the
## layout of `promu crossbuild` (.promu.yml lists the same platforms; linux/arm/v7 is
## .build/linux-armv7, built with GOARM=7), through `promu build` for each (static,
## CGO_ENABLED=0), so it needs neither Docker nor promu's builder images. The default is the
## Linux platforms blackbox_exporter's images ship.
PLATFORMS ?= linux/amd64 linux/arm64 linux/arm/v7 linux/ppc64le linux/s390x linux/386
# platform_env sets os, arch, variant (v7 or empty), goarm (7 or empty) and dir from $$p.
platform_env = os=$${p%%/*}; rest=$${p\#*/}; arch=$${rest%%/*}; variant=$$(echo "$$rest" | cut -s -d/ -f2); \
	goarm=$${variant\#v}; dir=$$os-$$arch$$variant
crossbuild:
	@set -e; promu=$(PROMU); for p in $(PLATFORMS); do $(platform_env); \
		echo ">> building $$p"; \
		SOURCE_DATE_EPOCH="$(SOURCE_DATE_EPOCH)" GOOS=$$os GOARCH=$$arch GOARM=$$goarm CGO_ENABLED=0 "$$promu" build --prefix .build/$$dir; \
	done

## tarballs: the release tarballs of the crossbuild (binary, README.md, CHANGELOG.md, LICENSE) in
## .tarballs/provider-health-exporter-<version>.<os>-<arch>.tar.gz, with promu tarball, and their
## sha256sums.txt. promu names them after the git remote's repository; SOURCE_URL stands in
## for a clone without a remote.
tarballs: crossbuild
	rm -rf .tarballs
	@set -e; promu=$(PROMU); for p in $(PLATFORMS); do $(platform_env); \
		GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url GIT_CONFIG_VALUE_0="$(SOURCE_URL)" \
		GOOS=$$os GOARCH=$$arch$$variant "$$promu" tarball --prefix .tarballs .build/$$dir; \
	done
	$(GOTOOL) promu checksum .tarballs

## image: the multi-platform OCI image of the crossbuild (PLATFORMS), built without a container
## engine by tools/cmd/build-image (go-containerregistry): an OCI image layout in .build/image/
## (tag v<VERSION>) and an SPDX SBOM per platform in .build/sbom/. Its base holds the CA certificates
## and time zones of Debian's ca-certificates and tzdata packages, installed as root when missing.
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
image: crossbuild
	@[ -s /etc/ssl/certs/ca-certificates.crt ] && [ -d /usr/share/zoneinfo ] || \
		{ [ "$$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ca-certificates tzdata; } || \
		{ echo "make image: the image's base needs Debian's ca-certificates and tzdata: apt-get install ca-certificates tzdata" >&2; exit 1; }
	$(GO) build -C tools -o $(CURDIR)/.build/tools/build-image ./cmd/build-image
	.build/tools/build-image -binaries .build -out .build/image -sbom .build/sbom \
		-platforms "$(shell echo $(PLATFORMS) | tr ' ' ,)" -version "$(shell cat VERSION)" \
		-revision "$(IMAGE_REVISION)" -source "$(SOURCE_URL)" -source-date-epoch "$(SOURCE_DATE_EPOCH)"

## image-test: TestImage for every platform of PLATFORMS (-image.all-platforms): make image
## tarballs for the six platforms, each image's layout, binary, SBOM and tarball checked, the
## host's image run and pushed to a registry on loopback. make test builds and checks the host's
## platform alone (six platforms took about six minutes of a CI run); run this before a release
## and after changing the image's build (docs/testing.md).
image-test:
	$(GO) test -count=1 -timeout 45m -run '^TestImage$$' -v ./release -image.all-platforms

## test: every test with the race detector; parts of the test environment that are missing
## skip, or fail under REQUIRE_INTEGRATION=1.
## The integration tests start real systems; a whole run takes several minutes, and the first
## one also builds etcd and kube-apiserver (kube-binaries) and Prometheus 3 and Alertmanager
## (prom-binaries), so the per-binary timeout is raised.
## -count=1: Go's test cache cannot see the systems the tests start, so results are never reused.
test: test-deps test-env test-mixin
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	$(MAKE) fuzz-short

## fuzz-short: a short fuzz run (FUZZTIME each) of every fuzz target of FUZZ_TARGETS
## (package:FuzzName; a new fuzz target is added here), each seeded with its corpus in the
## package's testdata/fuzz/. make test runs it.
FUZZ_TARGETS = ./config:FuzzParse ./config:FuzzParseTargetFile ./exporter:FuzzProbeRequest ./shard:FuzzDecodePart
FUZZTIME ?= 10s
fuzz-short:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz: $$t for $(FUZZTIME)" >&2; \
		$(GO) test -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

## test-env: build every binary the integration tests run (kube-binaries, prom-binaries,
## helm-binary, vcsim-binary; once: later runs find them in a fraction of a second). A plain
## go test ./... uses them when they are built and otherwise skips the tests that need them,
## each saying to run this; it never builds them itself (REQUIRE_INTEGRATION=1 or
## BUILD_TEST_ENV=1 let it), so its first results come within a minute.
test-env: kube-binaries kube-node-binaries prom-binaries helm-binary vcsim-binary

## test-unit: the tests that need no real system, for the edit-test loop: go test -short, under
## which every integration test skips (no kube-apiserver, KVM host, Prometheus, Alertmanager or
## promtool, no root, no go build of a binary), in this module and the mixin's. It needs nothing
## but Go: no test-deps, no bin/ (see docs/testing.md). -count=1: some tests read their inputs
## through a child process (go tool jsonnet, controller-gen), which Go's test cache cannot see.
test-unit:
	$(GO) test -short -count=1 $(PKGS)
	cd mixin && $(GO) test -short -count=1 ./...

## soak: the long form of the ground-truth soak (test/soak, docs/testing.md): the real round
## runner and checkers against the real test environment (KVM hosts, the GCE wire server, a
## kube-apiserver) for SOAK_ROUNDS rounds (default 1000, about 35 minutes at 2 s a round) of
## seeded random faults, behind it the alert chain (Prometheus with the mixin's rules,
## Alertmanager, a webhook receiver) and the ProviderHealth writer; it fails on every verdict
## that stays wrong for more than one round after the truth changed, on every missing, extra or
## late page, late resolution or object that disagrees with the truth, and on leaks.
## SOAK_SEED=N replays a run (its seed is the first line it logs).
## A failed run keeps the whole Prometheus and Alertmanager logs and configurations in
## .build/soak/_artifacts/ (the test log prints only their tails).
SOAK_ROUNDS ?= 1000
SOAK_SEED   ?= 0
soak: test-deps kube-binaries prom-binaries
	mkdir -p .build/soak
	$(GO) test -race -count=1 -timeout 120m -run '^TestSoak$$' -v -artifacts -outputdir $(CURDIR)/.build/soak ./test/soak -soak.rounds=$(SOAK_ROUNDS) -soak.seed=$(SOAK_SEED)

## test-mixin: the monitoring mixin's tests (their own Go module, mixin/go.mod): the generated
## files match the sources, which are jsonnetfmt-formatted and jsonnet-lint clean; mixtool's
## lint rules; promtool check and unit tests of the rules on Prometheus 3; the dashboard.
test-mixin: prom-binaries
	cd mixin && $(GO) test -race -count=1 -timeout 10m ./...

# The mixin's jsonnet sources and generated files (see docs/mixin.md).
MIXIN_SOURCES := $(shell find mixin -name '*.jsonnet' -o -name '*.libsonnet')
JSONNETFMT    := $(GOTOOL) jsonnetfmt -n 2 --max-blank-lines 2 --string-style s --comment-style s

## mixin: format the mixin's jsonnet sources and regenerate mixin/prometheus_alerts.yaml,
## mixin/prometheus_rules.yaml, mixin/alertmanager/inhibit_rules.yaml, mixin/alertmanager/route.yaml
## and mixin/dashboards_out/
## from them (commit the result:
## make test fails when they drift).
mixin:
	$(JSONNETFMT) -i $(MIXIN_SOURCES)
	$(GOTOOL) jsonnet-lint -J mixin $(MIXIN_SOURCES)
	$(GOTOOL) jsonnet -J mixin -S mixin/alerts.jsonnet > mixin/prometheus_alerts.yaml
	$(GOTOOL) jsonnet -J mixin -S mixin/rules.jsonnet > mixin/prometheus_rules.yaml
	$(GOTOOL) jsonnet -J mixin -S mixin/inhibit_rules.jsonnet > mixin/alertmanager/inhibit_rules.yaml
	$(GOTOOL) jsonnet -J mixin -S mixin/route.jsonnet > mixin/alertmanager/route.yaml
	rm -rf mixin/dashboards_out && mkdir -p mixin/dashboards_out
	$(GOTOOL) jsonnet -J mixin -m mixin/dashboards_out mixin/dashboards.jsonnet >/dev/null

## deploy-rules: deploy/prometheusrule.yaml, the mixin's alerts and rules as a PrometheusRule,
## and deploy/alertmanagerconfig.yaml, its inhibit rules as an AlertmanagerConfig, generated from mixin/
## (run it after `make mixin`; make test fails when the file drifts), and the same two specs in
## the Helm chart (charts/provider-health-exporter/files/), with the mixin's dashboards, their job,
## uid and title placeholders the chart replaces with the release's (charts/chart_config.libsonnet).
deploy-rules:
	$(GOTOOL) jsonnet -J mixin -S deploy/prometheusrule.jsonnet > deploy/prometheusrule.yaml
	$(GOTOOL) jsonnet -J mixin -S deploy/alertmanagerconfig.jsonnet > deploy/alertmanagerconfig.yaml
	$(GOTOOL) jsonnet -J mixin -S charts/prometheusrule-spec.jsonnet > charts/provider-health-exporter/files/prometheusrule-spec.yaml
	$(GOTOOL) jsonnet -J mixin -S charts/alertmanagerconfig-spec.jsonnet > charts/provider-health-exporter/files/alertmanagerconfig-spec.yaml
	rm -rf charts/provider-health-exporter/files/dashboards && mkdir -p charts/provider-health-exporter/files/dashboards
	$(GOTOOL) jsonnet -J mixin -m charts/provider-health-exporter/files/dashboards charts/grafana-dashboards.jsonnet >/dev/null

## test-deps: install the Debian packages the integration tests need (as root, when missing).
test-deps:
	bash scripts/install-test-deps.sh

## kube-binaries: build etcd and kube-apiserver from the Go module proxy into bin/kube-<version>/
## (once; later runs find them in a fraction of a second).
kube-binaries:
	sh scripts/build-kube.sh

## kube-node-binaries: build kube-controller-manager, kube-scheduler, kubelet and kube-proxy (the
## same release, tools/kube) into bin/kube-node-<version>/, for make cluster and the chart's test
## on a node (once; about 5 minutes on two cores the first time).
kube-node-binaries:
	sh scripts/build-kube.sh -node >/dev/null

## helm-binary: build helm (tools/helm, its own module: helm brings its own Kubernetes library
## versions) from the Go module proxy into bin/helm-<version>/, for the chart's tests (charts/).
helm-binary:
	$(GO) run ./test/testenv/helm/cmd/build-helm >/dev/null

## vcsim-binary: build the vCenter simulator (test/testenv/vcsim/cmd/vcsim, govmomi's
## simulator package) into bin/vcsim-<hash>-<version>/ (once; about a minute on two cores).
vcsim-binary:
	$(GO) run ./test/testenv/vcsim/cmd/build-vcsim >/dev/null

## prom-binaries: build Prometheus 3 and promtool (tools/prometheus, -tags
## remove_all_sd,enable_kubernetes_sd, version stamped) and Alertmanager and amtool
## (tools/alertmanager) from the Go module proxy into bin/prometheus-<version>+<tags>/ and
## bin/alertmanager-<version>/ (once; the first Prometheus build
## takes several minutes on two cores, later runs a fraction of a second).
prom-binaries:
	$(GO) run ./test/testenv/promstack/cmd/build-promstack >/dev/null

## demo: as root, a local environment with the exporter in the foreground at fixed addresses
## (exporter 127.0.0.1:9847, Prometheus :9090, Alertmanager :9093; see docs/demo.md). It builds
## what is missing first; Ctrl-C stops everything it started.
demo: test-deps build kube-binaries prom-binaries
	@echo "demo: building the demo launcher" >&2
	$(GO) build -o .build/phe-demo ./test/demo/cmd/phe-demo
	.build/phe-demo -exporter ./$(BINARY)

## cluster: as root on Debian, a one-node Kubernetes of real parts on this machine (etcd,
## kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, containerd with
## runc, CNI) with the exporter's image loaded under the chart's default reference; admin
## kubeconfig in .build/cluster/kubeconfig (docs/cluster.md). It builds what is missing first;
## Ctrl-C stops it and removes everything it made.
cluster: test-deps helm-binary kube-node-binaries
	$(MAKE) image PLATFORMS=linux/$(shell $(GO) env GOARCH)
	$(GO) build -o .build/phe-cluster ./test/testenv/cluster/cmd/phe-cluster
	.build/phe-cluster -dir .build/cluster -image .build/image

## fuzz: search for inputs that crash the providers-file parser (make test runs the seed corpus).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./config

## generate: the list of the build's provider types (providers/) where other files spell it out
## (scripts/gentypes: the CRD's enum marker, the docs' marked places, and each type's
## credentials Secret from its checks/<type>/credentials.yaml into the Helm chart's
## files/types.yaml, values.yaml and values.schema.json, deploy/deployment.yaml and
## docs/deploy.md), then the ProviderHealth
## CRD (deploy/crd/, copied into the Helm chart's files/crds/, which its templates/crd.yaml
## renders, so helm upgrade updates it) and the API types' deepcopy code, from the kubebuilder
## markers in crdwriter/v1alpha1, and the chart's README.md from its values.yaml's comments
## (scripts/chartdoc). `make test` fails when the committed files drift.
generate:
	$(GO) run ./scripts/gentypes
	$(GOTOOL) controller-gen object paths=./crdwriter/v1alpha1/... crd:crdVersions=v1 output:crd:dir=deploy/crd
	cp deploy/crd/*.yaml charts/provider-health-exporter/files/crds/
	$(GO) run ./scripts/chartdoc

## bench: every benchmark, with allocations; no tests. Then the mixin's availability rules
## against the rules they replaced on a real Prometheus (TestAvailabilityCost, docs/benchmarks.md):
## 30 days of 1,000 targets backfilled with promtool (a 5 GB input file in the temporary
## directory, tens of minutes on two cores); BENCH_TARGETS changes the number of targets.
BENCH_TARGETS ?= 1000
bench: prom-binaries
	$(GO) test -run '^$$' -timeout 120m -bench . -benchmem $(PKGS)
	cd mixin && $(GO) test -count=1 -timeout 120m -run '^TestAvailabilityCost$$' -v . -availability.cost -availability.cost.targets=$(BENCH_TARGETS)

## lint: go vet, a gofmt check and staticcheck, of this module, the mixin's and the tools module's
## programs (tools/cmd/).
lint: vet fmt-check staticcheck

vet:
	$(GO) vet $(PKGS)
	cd mixin && $(GO) vet ./...
	cd tools && $(GO) vet ./...

fmt-check:
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt would change these files (run make fmt):"; echo "$$unformatted"; exit 1; \
	fi

staticcheck:
	$(GOTOOL) staticcheck $(PKGS)
	cd mixin && $(GO) tool -modfile=../tools/go.mod staticcheck ./...
	cd tools && $(GO) tool staticcheck ./...

## fmt: format every Go file.
fmt:
	gofmt -w .

clean:
	rm -f $(BINARY)
	rm -rf .build .tarballs
