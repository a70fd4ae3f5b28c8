# Developer entry points. `make help` lists the targets.
#
# Targets that need a database get it from scripts/devdb.sh, which uses
# $DATABASE_URL when set, else a PostgreSQL server on 127.0.0.1:5432, else a
# throwaway cluster in .pgdata/ (installing PostgreSQL and PgQ when it can).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export PATH := /usr/local/go/bin:$(PATH)

DEVDB := scripts/devdb.sh

# Extra arguments for go test, e.g. make test TESTFLAGS='-run TestQueue -v'.
TESTFLAGS ?=
# Extra flags for the demo, e.g. make demo DEMOFLAGS='--tenants 20 --rate 50'
# (partitionq demo --help lists them).
DEMOFLAGS ?=

# Shell prefix for recipes that need the database: sets DATABASE_URL (kept if
# already set; scripts/devdb.sh checks it) and PARTITIONQ_TEST_DATABASE_URL.
WITH_DB = url="$$($(DEVDB) url)"; \
	export DATABASE_URL="$$url" PARTITIONQ_TEST_DATABASE_URL="$$url" PARTITIONQ_REQUIRE_DB=1;

# The engines make test runs the whole suite on, one after the other
# (docs/engines.md): PgQ (the extension), then PgQue, installed in each test
# database from PgQue's SQL file: $PARTITIONQ_PGQUE_SQL when set, else
# ../shared/engines/pgque/pgque.sql beside the repository, else
# /work/shared/engines/pgque/pgque.sql. The file is never copied into the
# repository; where none is found the PgQue half is skipped, with a line
# saying so. make test ENGINES=pgq runs one half.
ENGINES ?= pgq pgque
REPO := $(patsubst %/,%,$(dir $(abspath $(firstword $(MAKEFILE_LIST)))))
PGQUE_SQL := $(or $(abspath $(PARTITIONQ_PGQUE_SQL)),$(firstword $(wildcard $(abspath $(REPO)/../shared/engines/pgque/pgque.sql) /work/shared/engines/pgque/pgque.sql)))

# Runs the command after it once per engine of ENGINES (scripts/halves.sh),
# one half after the other on the database above (PQ_HALVES_APART=1: the
# PgQue half beside the PgQ half, on a throwaway cluster of its own); every
# half runs, and the recipe fails if any half failed.
PER_ENGINE = PGQUE_SQL="$(PGQUE_SQL)" scripts/halves.sh $(ENGINES) --

.DEFAULT_GOAL := help
.PHONY: help test test-short demo bench bench-short db db-stop build image vet lint

help: ## List the targets
	@echo 'Usage: make TARGET'
	@echo
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_-]+:.*## / { printf "  %-12s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

# scripts/gotest.sh runs the packages one at a time (-p 1: the packages
# that run worker processes, crash and CLI, each open some 60 connections
# at their peak, and two at once go past a default server's max_connections
# of 100), then test/chaos, which has a throwaway cluster of its own.
test: ## Run all tests on PgQ (with the race detector), then on PgQue (ENGINES=...)
	@$(WITH_DB) $(PER_ENGINE) scripts/gotest.sh -race -count=1 -timeout 20m $(TESTFLAGS)

test-short: ## Same as test, with -short
	@$(WITH_DB) $(PER_ENGINE) scripts/gotest.sh -race -count=1 -timeout 15m -short $(TESTFLAGS)

demo: ## Run the demo: a storage service in miniature, in the console (DEMOFLAGS=...)
	@$(WITH_DB) set -x; go run ./cmd/partitionq demo $(DEMOFLAGS)

# The benchmark's server: $PQBENCH_DATABASE_URL when set; else a throwaway
# cluster of scripts/devdb.sh (probing port 1 forces it), which preloads
# pg_stat_statements and is nobody else's, so its CPU and WAL are the
# bench's own. Extra flags: make bench BENCHFLAGS='-no-peers' (pqbench -help).
BENCHFLAGS ?=
BENCH_DB = url="$${PQBENCH_DATABASE_URL:-$$(env -u DATABASE_URL PQ_DEVDB_PROBE_PORT=1 $(DEVDB) url)}";

bench: ## Run the benchmark (docs/benchmarks.md): partitionq, a plain consumer, limits, pg-boss, graphile-worker
	@$(BENCH_DB) set -x; go run ./cmd/pqbench -db "$$url" $(BENCHFLAGS)

bench-short: ## The benchmark's short form (seconds; CI runs it as a test in cmd/pqbench)
	@$(BENCH_DB) set -x; go run ./cmd/pqbench -short -db "$$url" $(BENCHFLAGS)

db: ## Ensure a PostgreSQL server with PgQ and print its URL
	@$(DEVDB) url

db-stop: ## Stop the throwaway cluster in .pgdata/ (if one runs)
	@$(DEVDB) stop

# How the partitionq command is built, by make build and in its image:
# make image passes both to the Dockerfile (its build arguments BUILD_ENV
# and BUILD_FLAGS), so the two are one definition. A static binary (no
# cgo), without the paths of the machine that built it.
BUILD_ENV := CGO_ENABLED=0
BUILD_FLAGS := -trimpath

build: ## Build every package, and the partitionq command into bin/partitionq
	$(BUILD_ENV) go build $(BUILD_FLAGS) ./...
	$(BUILD_ENV) go build $(BUILD_FLAGS) -o bin/partitionq ./cmd/partitionq

# The image of the partitionq command (Dockerfile; deploy/kubernetes runs
# it), tagged IMAGE, built with the Go of go.mod's toolchain line. It needs
# a docker daemon; push it where your cluster pulls from.
VERSION := $(shell sed -n 's/^const Version = "\(.*\)"$$/\1/p' partitionq/version.go)
GO_VERSION := $(shell sed -n 's/^toolchain go//p' go.mod)
IMAGE ?= partitionq:$(VERSION)

image: ## Build the container image IMAGE (default partitionq:<version>) with docker
	docker build --build-arg GO_IMAGE=golang:$(GO_VERSION)-bookworm \
		--build-arg BUILD_ENV='$(BUILD_ENV)' --build-arg BUILD_FLAGS='$(BUILD_FLAGS)' -t '$(IMAGE)' .

# The linter, pinned: go run fetches and builds it (a minute the first time),
# outside the module's go.mod. Its configuration is staticcheck.conf.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: ## go vet and staticcheck (pinned, staticcheck.conf), as CI runs them
	go vet ./...
	go run $(STATICCHECK) ./...

vet: ## go vet ./...
	go vet ./...

# make chaos runs the chaos suite's long form (docs/chaos.md) on a throwaway
# PostgreSQL cluster of its own, which it restarts; CHAOS='faults -long'
# runs the fault matrix's long form instead (make soak: the soak); CHAOS='run -h' lists the flags. The short form runs
# in make test (test/chaos).
CHAOS ?= run -long
# make fuzz runs every fuzz target for FUZZTIME each: a duration, or a
# count of runs such as 200x (the seed corpora in testdata/fuzz run in
# make test).
FUZZTIME ?= 10s
FUZZ_TARGETS := partitionq:FuzzValidateKey partitionq:FuzzMessageValidate partitionq:FuzzValidateName \
	partitionq:FuzzSendBatch partitionq:FuzzSetup internal/cli:FuzzDecodeLine internal/cli:FuzzSendLines \
	partitionq/termsafe:FuzzLine partitionq/termsafe:FuzzEcho

.PHONY: chaos soak fuzz

chaos: ## Chaos long form, minutes, own cluster (CHAOS='faults -long' for the fault matrix; make soak for the soak)
	go run ./test/cmd/chaos $(CHAOS)

# make soak runs the soak: steady load with faults (workers killed, sessions
# terminated) and an operator skipping and replaying, sampling memory,
# goroutines, sessions and table sizes (docs/chaos.md); SOAK is its length
# (the long form: SOAK=1h), SOAKFLAGS more flags (chaos soak -h).
SOAK ?= 5m
SOAKFLAGS ?=
soak: ## Soak with faults for SOAK (default 5m; SOAK=1h for the long form), own cluster
	go run ./test/cmd/chaos soak -duration $(SOAK) $(SOAKFLAGS)

fuzz: ## Run each fuzz target for FUZZTIME (default 10s)
	@$(WITH_DB) set -e; for t in $(FUZZ_TARGETS); do \
		go test -list "^$${t#*:}$$" ./$${t%%:*} | grep -x "$${t#*:}" >/dev/null || { echo "make fuzz: no fuzz target $${t#*:} in ./$${t%%:*} (FUZZ_TARGETS in the Makefile)"; exit 1; }; \
		set -x; go test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) ./$${t%%:*}; set +x; done
