# Build, test and lint provider_health_exporter. Tools (promu, staticcheck) are pinned in the
# separate tools module (tools/go.mod) and run through `go tool`, so nothing needs installing
# beyond Go itself and the tools never enter the exporter's own go.mod.

GO       ?= go
GOTOOL   := $(GO) tool -modfile=tools/go.mod
BINARY   := provider_health_exporter
PKGS     := ./...

.PHONY: all build test test-deps bench lint vet fmt-check staticcheck fmt clean

all: lint test build

## build: the binary, with version information, through promu (see .promu.yml).
build:
	$(GOTOOL) promu build --prefix .

## test: every test with the race detector; parts of the test environment that are missing
## skip, or fail under REQUIRE_INTEGRATION=1.
test: test-deps
	$(GO) test -race $(PKGS)

## test-deps: prepare what the integration tests need, when there is anything to prepare.
test-deps:
	@if [ -f scripts/install-test-deps.sh ]; then bash scripts/install-test-deps.sh; fi

## bench: every benchmark, with allocations; no tests.
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## lint: go vet, a gofmt check and staticcheck.
lint: vet fmt-check staticcheck

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt would change these files (run make fmt):"; echo "$$unformatted"; exit 1; \
	fi

staticcheck:
	$(GOTOOL) staticcheck $(PKGS)

## fmt: format every Go file.
fmt:
	gofmt -w .

clean:
	rm -f $(BINARY)
	rm -rf .build
