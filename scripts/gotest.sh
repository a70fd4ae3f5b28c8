#!/usr/bin/env bash
# go test of the whole module, as make test and make test-short run it:
# the arguments are go test's flags (no packages).
#
# The large packages run one at a time (-p 1): the packages that run
# worker processes (crash, CLI) each open some 60 connections at their
# peak, and two at once go past a default server's max_connections of 100;
# the small ones run two at a time (below).
# test/chaos runs its faults against a throwaway cluster of its own (it
# restarts the server, so never the shared one), after the other packages.
# PQ_CHAOS_BESIDE=1 runs it beside them, internal/cli excepted (that runs
# after it): on two cores, busy all along, that saved little, and at full
# load one run in three missed a wait (a 2 s lease
# lapsed in partitionq's balance test; status's 2 s timeout ran out in the
# CLI's), and with the race detector the CLI's health test missed its wait
# for a stuck loop.
set -uo pipefail

cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

# without_race sets the array args to its arguments without -race.
without_race() {
	args=()
	for a in "$@"; do
		[[ $a == -race ]] || args+=("$a")
	done
}

# The race detector checks partitionq's Go code, which is the same on both
# engines: the PgQ half runs it, the PgQue half (PARTITIONQ_ENGINE=pgque)
# leaves -race out, which saves its time and CPU. PQ_RACE_ALL=1 keeps -race
# on every half.
if [[ ${PARTITIONQ_ENGINE:-} == pgque && ${PQ_RACE_ALL:-} != 1 ]]; then
	without_race "$@"
	if ((${#args[@]} != $#)); then
		echo "gotest: the PgQue half runs without -race (the PgQ half runs it; PQ_RACE_ALL=1 keeps it here)"
	fi
	set -- "${args[@]}"
fi

# The chaos and crash suites run their workers as processes of their own,
# built without the race detector: with -race it would check their
# harness, not partitionq (whose tests run with it), and cost their half
# its time. They run without it in every half; PQ_RACE_ALL=1 keeps it.
harness_args=("$@")
if [[ ${PQ_RACE_ALL:-} != 1 ]]; then
	without_race "$@"
	harness_args=("${args[@]}")
fi

chaos=./test/chaos
others=$(go list ./... | grep -vx "github.com/partitionq/partitionq/test/chaos\|github.com/partitionq/partitionq/test/crash") || {
	echo "gotest: go list failed" >&2
	exit 2
}
# The packages whose tests do not depend on the engine run in the PgQ half
# only: the benchmark's harness (make bench measures PgQue with -engines),
# the console (its reads are the library's, tested on both), the deploy
# kit and the docs' links; so do the tests of that kind in the other
# packages (pgtest.EngineNeutral). PQ_ALL_PACKAGES=1 runs them in every half.
if [[ ${PARTITIONQ_ENGINE:-} == pgque && ${PQ_ALL_PACKAGES:-} != 1 ]]; then
	neutral='^github.com/partitionq/partitionq/(cmd/pqbench(/.*)?|tui|test/deploy|internal/docs)$'
	others=$(grep -vE "$neutral" <<<"$others")
	echo "gotest: the PgQue half leaves out cmd/pqbench, tui, test/deploy and internal/docs, which do not depend on the engine (the PgQ half runs them; PQ_ALL_PACKAGES=1 runs them here)"
fi

# chaos_test runs the chaos suite, one at a time on this machine: make
# test's halves may run beside each other (PQ_HALVES_APART=1), and two
# suites at once (each a cluster of its own, worker processes killed and
# restarted) overload two cores. -o: the lock's descriptor is closed before
# go test runs, so that the chaos suite's server (a daemon, which may
# outlive a killed run) does not inherit it and hold the lock.
# -parallel 4: the fault matrix's runs go on at once, four at a time
# (their handlers hold events for seconds; two cores keep up with four).
chaos_test() {
	local lock=${TMPDIR:-/tmp}/partitionq-chaos.lock
	if command -v flock >/dev/null; then
		flock -o "$lock" go test -parallel 4 "$@" "$chaos"
	else
		go test -parallel 4 "$@" "$chaos"
	fi
}

beside=${PQ_CHAOS_BESIDE:-}
# The CLI's tests run commands with their default timeouts (status waits
# 2 s), which a machine at full load misses: beside the chaos suite they
# run after it.
late=
if [[ "$beside" == 1 ]]; then
	late=$(grep -x "github.com/partitionq/partitionq/internal/cli" <<<"$others")
	others=$(grep -vx "github.com/partitionq/partitionq/internal/cli" <<<"$others")
	log=$(mktemp "${TMPDIR:-/tmp}/partitionq-chaos-XXXXXX.log")
	trap 'rm -f "$log"' EXIT
	chaos_test "${harness_args[@]}" >"$log" 2>&1 &
	chaos_pid=$!
	trap 'kill "$chaos_pid" 2>/dev/null; rm -f "$log"' INT TERM
fi
# The small packages (a few connections each, seconds of tests) run two
# at a time: each test binary takes seconds to link and start (with -race
# about 2.5 s), which two at a time halves. The large ones (the library's,
# the CLI's, the bench's, the console's, security and deploy: many
# connections, worker processes, timing waits) run one at a time after
# them.
large_re='^github.com/partitionq/partitionq/(partitionq|internal/cli|cmd/pqbench|tui|test/security|test/deploy|partitionq/internal/store)$'
small=$(grep -vE "$large_re" <<<"$others")
large=$(grep -E "$large_re" <<<"$others")
rc=0
if [[ -n $small ]]; then
	# shellcheck disable=SC2086 # the package list is words
	go test -p 2 "$@" $small || rc=$?
fi
if [[ -n $large ]]; then
	# shellcheck disable=SC2086 # the package list is words
	go test -p 1 "$@" $large || rc=$?
fi
go test "${harness_args[@]}" ./test/crash || rc=$?
if [[ "$beside" == 1 ]]; then
	wait "$chaos_pid"
	chaos_rc=$?
	cat "$log"
	if [[ -n $late ]]; then
		# shellcheck disable=SC2086 # the package list is words
		go test -p 1 "$@" $late || rc=$?
	fi
else
	chaos_test "${harness_args[@]}"
	chaos_rc=$?
fi
if ((chaos_rc != 0)); then
	echo "gotest: $chaos failed (its output is just above)"
	rc=$chaos_rc
fi
exit "$rc"
