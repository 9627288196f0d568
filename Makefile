# gmig — build, test and demo targets. Everything runs from a fresh Debian
# machine as root: `make test` and `make demo` install what they need first
# (idempotent, cached under .cache/, which git ignores).

SHELL      := /bin/bash
# Go keeps its caches under $HOME; a CI environment without one gets root's.
ifeq ($(HOME),)
export HOME := /root
endif
GO         ?= go
CACHE      := $(CURDIR)/.cache
BIN        := $(CURDIR)/bin
GOFLAGS    ?=
FUZZTIME   ?= 30s

.PHONY: all deps build test vet fmt-check fuzz demo demo-sim clean provision guest-image

all: build

# deps makes sure a Go toolchain that can build go.mod's version exists. A
# machine without Go gets Debian's, which then fetches the toolchain go.mod
# names through the module proxy (GOTOOLCHAIN=auto).
deps: $(CACHE)/deps.stamp
$(CACHE)/deps.stamp: go.mod
	@mkdir -p $(CACHE)
	@if ! command -v $(GO) >/dev/null 2>&1; then \
		echo "deps: installing Debian's golang-go and gcc (Go toolchain bootstrap)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go gcc >/dev/null; \
	fi
	@GOTOOLCHAIN=auto $(GO) version
	@GOTOOLCHAIN=auto $(GO) mod download
	@touch $@

build: deps
	@mkdir -p $(BIN)
	GOTOOLCHAIN=auto $(GO) build $(GOFLAGS) -o $(BIN)/ ./cmd/...

vet: deps
	GOTOOLCHAIN=auto $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# provision builds the end-to-end tests' QEMU 11.1 root and guest kernel
# under .cache/ (scripts/provision.sh; cached, about 90 s the first time).
provision:
	@bash scripts/provision.sh

# guest-image builds the guest's initramfs (/init = cmd/gmig-guest).
guest-image: deps provision
	@bash scripts/guest-image.sh

# test is the README's test command and what CI runs (.ci/run). Every
# package runs under the race detector; fuzz targets run their seed corpora;
# tests/ boots a real Linux guest under QEMU 11.1 with a vGPU.
test: deps fmt-check vet guest-image
	@start=$$(date +%s); \
	GOTOOLCHAIN=auto $(GO) test -race -count=1 -timeout 30m ./... && \
	echo "make test: all packages passed in $$(( $$(date +%s) - start ))s"

# fuzz runs every fuzz target for FUZZTIME each.
fuzz: deps
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "== $$pkg $$f ($(FUZZTIME))"; \
			GOTOOLCHAIN=auto $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

# demo is the README's main command: two gmigd daemons and a Linux VM under
# QEMU 11.1 using its vGPU, a live migration between them in the middle of
# the guest's workload, and the downtime report (provisioning QEMU and the
# guest first). `make demo-sim` runs the in-process simulator instead.
demo: build guest-image
	GMIG_CACHE=$(CACHE) $(BIN)/gmigd demo

demo-sim: build
	$(BIN)/gmigd demo -sim

clean:
	rm -rf $(BIN)

# soak runs hostd's load test for SOAK (default 30m): 16 simulated vGPUs'
# workloads, migrated back and forth between two gmigd four at a time,
# with the process's heap, descriptors and goroutines sampled and checked
# flat (docs/testing.md, "Load and soak"). Not part of `make test`.
SOAK ?= 30m
.PHONY: soak
soak: deps
	GMIG_SOAK=$(SOAK) GOTOOLCHAIN=auto $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./hostd
