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

# Shell prefix for recipes that need the database: sets DATABASE_URL (kept if
# already set; scripts/devdb.sh checks it) and PARTITIONQ_TEST_DATABASE_URL.
WITH_DB = url="$$($(DEVDB) url)"; \
	export DATABASE_URL="$$url" PARTITIONQ_TEST_DATABASE_URL="$$url" PARTITIONQ_REQUIRE_DB=1;

.DEFAULT_GOAL := help
.PHONY: help test test-short demo bench db db-stop build vet

help: ## List the targets
	@echo 'Usage: make TARGET'
	@echo
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_-]+:.*## / { printf "  %-12s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

test: ## Run all tests with the race detector against PostgreSQL+PgQ
	@$(WITH_DB) set -x; go test -race -count=1 -timeout 15m $(TESTFLAGS) ./...

test-short: ## Same as test, with -short
	@$(WITH_DB) set -x; go test -race -count=1 -timeout 15m -short $(TESTFLAGS) ./...

demo: ## Run the demo (go run ./cmd/partitionq demo)
	@$(WITH_DB) set -x; go run ./cmd/partitionq demo

bench: ## Run the benchmarks once each (-benchtime 1x)
	@$(WITH_DB) set -x; go test -run '^$$' -bench . -benchtime 1x ./partitionq/...

db: ## Ensure a PostgreSQL server with PgQ and print its URL
	@$(DEVDB) url

db-stop: ## Stop the throwaway cluster in .pgdata/ (if one runs)
	@$(DEVDB) stop

build: ## go build ./...
	go build ./...

vet: ## go vet ./...
	go vet ./...
