#!/usr/bin/env bash
# go test of the whole module, as make test and make test-short run it:
# the arguments are go test's flags (no packages).
#
# test/chaos runs its faults against a throwaway cluster of its own (it
# restarts the server, so never the shared one), and most of its minutes
# are handlers holding events and leases running out, not CPU: it runs
# beside the other packages. Those run one at a time (-p 1): the packages
# that run worker processes (crash, CLI) each open some 60 connections at
# their peak, and two at once go past a default server's max_connections
# of 100. test/chaos's output is printed when both are done.
set -uo pipefail

cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

chaos=./test/chaos
others=$(go list ./... | grep -vx "github.com/partitionq/partitionq/test/chaos") || {
	echo "gotest: go list failed" >&2
	exit 2
}

log=$(mktemp "${TMPDIR:-/tmp}/partitionq-chaos-XXXXXX.log")
trap 'rm -f "$log"' EXIT
go test "$@" "$chaos" >"$log" 2>&1 &
chaos_pid=$!
trap 'kill "$chaos_pid" 2>/dev/null; rm -f "$log"' INT TERM

# shellcheck disable=SC2086 # the package list is words
go test -p 1 "$@" $others
rc=$?
wait "$chaos_pid"
chaos_rc=$?
cat "$log"
if ((chaos_rc != 0)); then
	echo "gotest: $chaos failed (its output is just above)"
	rc=$chaos_rc
fi
exit "$rc"
