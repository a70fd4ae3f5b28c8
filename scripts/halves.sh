#!/usr/bin/env bash
# scripts/halves.sh ENGINE... -- CMD...: run CMD once per queue engine (the
# halves of make test and make test-short), with PARTITIONQ_ENGINE set, and
# PARTITIONQ_PGQUE_SQL for PgQue. Every half runs; the script fails if any
# half failed.
#
# The halves run one after the other on DATABASE_URL (as make gives it).
# With PQ_HALVES_APART=1, each half after the first runs beside it, on a
# throwaway cluster of its own (scripts/devdb.sh with
# PQ_DEVDB_NAME=<engine>: .pgdata-<engine>/, its own max_connections), when
# the PostgreSQL server programs are installed, and prints its output once
# it ends: faster on a machine with the cores for it; on two cores the two
# halves slowed each other down past what they saved (load averages of 40,
# leases lapsing, handlers timing out).
#
# Environment:
#   PGQUE_SQL         PgQue's install file (the Makefile's PGQUE_SQL); the
#                     PgQue half is skipped, saying so, without it
#   PQ_HALVES_APART   1: the halves beside each other, each on a server of
#                     its own
set -uo pipefail

cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

engines=()
while (($# > 0)) && [[ $1 != -- ]]; do
	engines+=("$1")
	shift
done
if (($# == 0)); then
	echo "usage: scripts/halves.sh ENGINE... -- CMD..." >&2
	exit 2
fi
shift # --

# check ENGINE: the half can run (its install file, for PgQue); 1 to skip it.
check() {
	case $1 in
	pgq) return 0 ;;
	pgque)
		if [[ -z ${PGQUE_SQL:-} ]]; then
			echo "make: skipping the PgQue half: no PgQue install file (set PARTITIONQ_PGQUE_SQL to PgQue's sql/pgque.sql; none at ../shared/engines/pgque/pgque.sql)"
			return 1
		fi
		if [[ ! -f $PGQUE_SQL ]]; then
			echo "halves: PARTITIONQ_PGQUE_SQL=$PGQUE_SQL is not a file" >&2
			exit 2
		fi
		return 0
		;;
	*)
		echo "halves: unknown engine $1 in ENGINES: use pgq and/or pgque" >&2
		exit 2
		;;
	esac
}

# half ENGINE: run CMD for ENGINE with the environment of the moment.
half() {
	echo "===== $1 half: ${*:2}"
	if PARTITIONQ_ENGINE=$1 PARTITIONQ_PGQUE_SQL="${PGQUE_SQL:-}" "${@:2}"; then
		echo "===== $1 half: passed"
		return 0
	fi
	echo "===== $1 half: FAILED"
	return 1
}

apart=${PQ_HALVES_APART:-0}
if [[ $apart != 0 ]] && ! { command -v initdb >/dev/null || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }; then
	apart=0
fi

failed=()
declare -A pids logs
port=55440
cleanup() {
	for e in "${!pids[@]}"; do
		kill "${pids[$e]}" 2>/dev/null
	done
	for e in "${!logs[@]}"; do
		PQ_DEVDB_NAME=$e scripts/devdb.sh stop >/dev/null 2>&1 || true
		rm -f "${logs[$e]}"
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

first=1
for e in "${engines[@]}"; do
	check "$e" || continue
	if ((first)) || [[ $apart == 0 ]]; then
		first=0
		continue
	fi
	# A half beside the first: its own server, its own log.
	url=$(env -u DATABASE_URL PQ_DEVDB_PROBE_PORT=1 PQ_DEVDB_NAME="$e" PQ_DEVDB_PORT=$port scripts/devdb.sh url) || {
		echo "halves: no throwaway cluster for the $e half; it runs after the others" >&2
		continue
	}
	port=$((port + 1))
	logs[$e]=$(mktemp "${TMPDIR:-/tmp}/partitionq-half-$e-XXXXXX.log")
	echo "===== $e half: beside the others, on its own cluster ($url); its output comes when it ends"
	DATABASE_URL=$url PARTITIONQ_TEST_DATABASE_URL=$url half "$e" "$@" >"${logs[$e]}" 2>&1 &
	pids[$e]=$!
done

first=1
for e in "${engines[@]}"; do
	[[ -n ${pids[$e]:-} ]] && continue
	check "$e" >/dev/null || continue
	half "$e" "$@" || failed+=("$e")
done
for e in "${engines[@]}"; do
	[[ -n ${pids[$e]:-} ]] || continue
	wait "${pids[$e]}"
	rc=$?
	cat "${logs[$e]}"
	((rc == 0)) || failed+=("$e")
	unset "pids[$e]"
done
if ((${#failed[@]})); then
	echo "make: failed on: ${failed[*]}"
	exit 1
fi
