# `make test` is the README's second set-up command; `make run` does what its first one does.
GO ?= go
# go-control-plane compiles the generated encoders that envoyrls.Codec uses
# for responses only with this build tag; every go command below, and the go
# builds that tests and the bench harness run, inherit it (after any GOFLAGS
# already set, in the environment or with go env -w).
export GOFLAGS := $(strip $(shell $(GO) env GOFLAGS) -tags=vtprotobuf)

# The packages of both modules: the service's (.) and the benchmark harness's (bench/, its own module so that
# the service's requires no charting library). go.work joins them, but ./... stops at a nested module.
PKGS = ./... ./bench/...

.PHONY: run test deps build lint unit e2e real compose k8s fuzz bench capacity rlqs-bench faults soak

# Run the sidecar on the embedded in-memory store with the example rules.
run:
	$(GO) run ./cmd/ratelimit-sidecar -config examples/rules -log-format console

# Everything CI runs: installs redis and Envoy when missing, builds, lints,
# and runs every test (unit, real redis-server, real Envoy) under -race.
test: deps build lint unit e2e real

deps:
	scripts/deps.sh

build:
	$(GO) build -o bin/ratelimit-sidecar ./cmd/ratelimit-sidecar

# Every module in the repository (go.mod files git knows of) must be tidy: go mod tidy -diff prints what
# tidying would change and fails.
lint:
	@for mod in $$(git ls-files go.mod '*/go.mod'); do \
	  dir=$$(dirname $$mod); \
	  (cd $$dir && $(GO) mod tidy -diff) || { echo "go mod tidy: the module in $$dir is not tidy"; exit 1; }; \
	done
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) vet -tags e2e ./test/e2e/
	$(GO) vet -tags compose ./test/compose/
	$(GO) vet -tags k8s ./test/k8s/
	$(GO) tool staticcheck $(PKGS)
	$(GO) test -count=1 ./internal/codecheck/

unit:
	$(GO) test -race -count=1 -timeout 10m $(PKGS)

e2e:
	$(GO) test -race -count=1 -timeout 10m -tags e2e ./test/e2e/

# The deployment files run for real (docs/deployment.md): docker-compose.yml under podman-compose, then
# deploy/k8s on a real single-node Kubernetes (scripts/k8s.sh). Each installs and starts what it needs and
# removes it: iptables chains podman's CNI plugins add are deleted again, and the cluster goes down even when
# a test fails, ending with `scripts/k8s.sh check` (the host is as it was).
real: compose k8s

compose:
	scripts/images.sh
	scripts/iptables-chains.sh run $(GO) test -count=1 -timeout 10m -tags compose ./test/compose/

k8s:
	scripts/k8s.sh up
	scripts/k8s.sh exec $(GO) test -count=1 -timeout 20m -tags k8s -v ./test/k8s/; rc=$$?; scripts/k8s.sh down && exit $$rc

# Each fuzz target for FUZZTIME (default 20s); new crashers land in testdata/fuzz.
FUZZTIME ?= 20s
fuzz:
	@for pkg in ./pkg/window ./pkg/rules ./pkg/envoyrls ./pkg/rlqs ./pkg/rlqs/redisledger; do \
	  for f in $$($(GO) test -list 'Fuzz.*' $$pkg | grep ^Fuzz); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# The load harness (see docs/benchmarks.md); flags via BENCHFLAGS.
bench:
	bench/run.sh $(BENCHFLAGS)

# Remeasures docs/capacity.md's inputs and rewrites its tables and chart (bench/capacity.sh); flags via BENCHFLAGS.
capacity:
	bench/capacity.sh $(BENCHFLAGS)

# RLQS's cost per report and per usage, its over-admission, and the requests it governs per core next to
# ShouldRateLimit's, in one harness run (bench/rlqs.sh); flags via BENCHFLAGS, PUBLISH=1 to rewrite
# docs/capacity.md's RLQS part.
rlqs-bench:
	bench/rlqs.sh $(BENCHFLAGS)

# Every fault of bench/faults against the sidecar and envoyproxy/ratelimit (docs/reliability.md); flags via
# BENCHFLAGS. `make unit` runs the short version (a few faults, the sidecar alone).
faults:
	bench/faults.sh $(BENCHFLAGS)

# The soak of bench/faults for SOAK (default 30m): two replicas, rules reloads, xDS pushes and Sentinel
# failovers under steady load; `make unit` runs a 60-second one. Its per-interval figures go to bench/out-soak.
SOAK ?= 30m
soak:
	cd bench && $(GO) test -count=1 -timeout 0 -run 'TestSoak$$' -v ./faults -args -soak.duration $(SOAK) -soak.out $(CURDIR)/bench/out-soak
