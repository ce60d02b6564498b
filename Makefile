GO ?= go
PROTOC ?= protoc
GOBIN := $(shell $(GO) env GOPATH)/bin

# What `kvtier version` and kvtier_build_info report; override: make dist VERSION=v1.2.0
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/kvtier/kvtier/internal/buildinfo.Version=$(VERSION) -X github.com/kvtier/kvtier/internal/buildinfo.Commit=$(COMMIT)

# The binary and the C library speak RDMA when built with the rdma tag (cgo,
# libibverbs). auto: when libibverbs' header is installed (Debian's
# libibverbs-dev), so `make build` on a box with RDMA gives an RDMA-capable
# binary; such a binary needs libibverbs.so.1 at run time. make build RDMA=off
# leaves it out.
RDMA ?= auto
ifeq ($(RDMA),auto)
RDMA := $(shell test -f /usr/include/infiniband/verbs.h && command -v $${CC:-gcc} >/dev/null 2>&1 && echo on || echo off)
endif
TAGS := $(if $(filter on,$(RDMA)),-tags rdma,)

.PHONY: all build run dist test test-short bench generate tools vet fmt

all: build

build:
	$(GO) build $(TAGS) -ldflags "$(LDFLAGS)" -o bin/kvtier ./cmd/kvtier
	@# The C library (and with it the Python package python/kvtier) needs a C
	@# compiler for cgo; without one the binary is still built.
	@if command -v $${CC:-gcc} >/dev/null 2>&1; then \
		echo "$(GO) build $(TAGS) -buildmode=c-shared -o bin/libkvtier.so ./capi"; \
		$(GO) build $(TAGS) -ldflags "$(LDFLAGS)" -buildmode=c-shared -o bin/libkvtier.so ./capi && \
		rm -f bin/libkvtier.h && cp capi/kvtier_store.h bin/kvtier_store.h; \
	else echo "no C compiler ($${CC:-gcc}): skipping bin/libkvtier.so"; fi

# One command for a working appliance: master + appliance in one process, web UI on loopback.
# Flags through ARGS, another verb through CMD: make run ARGS="--dram 1GiB"; make run CMD=doctor ARGS=--json
CMD ?= standalone
run: build
	./bin/kvtier $(CMD) $(ARGS)

# A tarball to install on a box: the binary, the C library and Python package
# when capi/ and python/ exist (the library needs a C compiler), the systemd
# unit, the example configuration, the Grafana dashboard and firmware-notes/.
DIST_NAME := kvtier-$(VERSION)-$(shell $(GO) env GOOS)-$(shell $(GO) env GOARCH)
DIST_DIR := dist/$(DIST_NAME)
dist:
	rm -rf $(DIST_DIR) dist/$(DIST_NAME).tar.gz
	mkdir -p $(DIST_DIR)/bin
	$(GO) build -trimpath $(TAGS) -ldflags "$(LDFLAGS)" -o $(DIST_DIR)/bin/kvtier ./cmd/kvtier
	@if [ -d capi ]; then \
		if command -v $${CC:-gcc} >/dev/null 2>&1; then \
			mkdir -p $(DIST_DIR)/lib $(DIST_DIR)/include && \
			$(GO) build -trimpath $(TAGS) -ldflags "$(LDFLAGS)" -buildmode=c-shared -o $(DIST_DIR)/lib/libkvtier.so ./capi && \
			rm -f $(DIST_DIR)/lib/libkvtier.h && cp capi/*.h $(DIST_DIR)/include/; \
		else echo "no C compiler ($${CC:-gcc}): the tarball has no libkvtier.so"; fi; \
	fi
	@if [ -d python ]; then \
		mkdir -p $(DIST_DIR)/python && \
		tar -C python --exclude=__pycache__ --exclude='*.pyc' --exclude=build --exclude='*.egg-info' -cf - . | tar -C $(DIST_DIR)/python -xf - && \
		if [ -f $(DIST_DIR)/lib/libkvtier.so ]; then cp $(DIST_DIR)/lib/libkvtier.so $(DIST_DIR)/python/kvtier/; fi; \
	fi
	mkdir -p $(DIST_DIR)/systemd $(DIST_DIR)/grafana
	cp deploy/systemd/kvtier.service $(DIST_DIR)/systemd/
	cp deploy/kvtier.example.yaml $(DIST_DIR)/
	cp deploy/grafana/kvtier.json $(DIST_DIR)/grafana/
	cp -r firmware-notes $(DIST_DIR)/
	cp README.md ARCHITECTURE.md $(DIST_DIR)/
	tar -C dist -czf dist/$(DIST_NAME).tar.gz $(DIST_NAME)
	@echo "dist/$(DIST_NAME).tar.gz"

# All tests, concurrency under the race detector.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 40m ./...

test-short:
	$(GO) test -count=1 -short ./...

bench: build
	./scripts/bench.sh

# Regenerates the checked-in protobuf code. Needs Debian's protoc (apt-get install
# protobuf-compiler); the Go plugins are pinned and installed through the module proxy.
tools:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

generate: tools
	PATH="$(GOBIN):$$PATH" $(PROTOC) -I api/kvtierpb \
		--go_out=api/kvtierpb --go_opt=paths=source_relative \
		--go-grpc_out=api/kvtierpb --go-grpc_opt=paths=source_relative \
		api/kvtierpb/master.proto

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')
