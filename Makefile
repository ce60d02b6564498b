GO ?= go
PROTOC ?= protoc
GOBIN := $(shell $(GO) env GOPATH)/bin

.PHONY: all build run test test-short bench generate tools vet fmt

all: build

build:
	$(GO) build -o bin/kvtier ./cmd/kvtier
	@# The C library (and with it the Python package python/kvtier) needs a C
	@# compiler for cgo; without one the binary is still built.
	@if command -v $${CC:-gcc} >/dev/null 2>&1; then \
		echo "$(GO) build -buildmode=c-shared -o bin/libkvtier.so ./capi"; \
		$(GO) build -buildmode=c-shared -o bin/libkvtier.so ./capi && \
		rm -f bin/libkvtier.h && cp capi/kvtier_store.h bin/kvtier_store.h; \
	else echo "no C compiler ($${CC:-gcc}): skipping bin/libkvtier.so"; fi

# One command for a working appliance: master + appliance in one process, web UI on loopback.
run: build
	./bin/kvtier standalone

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
