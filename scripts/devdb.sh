#!/usr/bin/env bash
# scripts/devdb.sh — make sure a PostgreSQL server with the PgQ extension is
# reachable, and print its admin URL.
#
# Usage: scripts/devdb.sh [url|env|stop|destroy|help]
#
#   url      (default) ensure a server, print its URL as the only line on stdout
#   env      ensure a server, print `export DATABASE_URL='...'` (for eval)
#   stop     stop the throwaway cluster in .pgdata/ if this script started one
#   destroy  stop the throwaway cluster and delete its directory
#
# Which server is used, in this order:
#   1. $DATABASE_URL, if set. It must be reachable. If PgQ is missing and the
#      server runs on this machine, postgresql-<major>-pgq3 is installed
#      (as root, with apt-get); otherwise the script fails and says what to do.
#   2. A server on 127.0.0.1:$PQ_DEVDB_PROBE_PORT (default 5432) as user
#      postgres without a password (trust auth). PgQ is installed if missing.
#   3. A throwaway cluster in <repo>/.pgdata/ on 127.0.0.1:$PQ_DEVDB_PORT
#      (default 55432), created (initdb, trust auth) and started as needed.
#      If PostgreSQL is not installed at all, it is installed with apt-get
#      first (root on Debian only). (Debian's own new cluster on 5432 is
#      used only if it then answers with trust auth, which it does not by
#      default.)
#
# Progress messages go to stderr; stdout carries only the result.
#
# Environment:
#   DATABASE_URL          use this server (step 1)
#   PQ_DEVDB_PROBE_PORT   port probed on 127.0.0.1 in step 2 (default 5432);
#                         point it at an unused port to force step 3
#   PQ_DEVDB_PORT         port of the throwaway cluster (default 55432)
#   PQ_DEVDB_NAME         a name for a second throwaway cluster beside the
#                         first: it lives in .pgdata-NAME/ (make test runs
#                         its PgQue half on one, beside the PgQ half)
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd -P)

PROBE_PORT=${PQ_DEVDB_PROBE_PORT:-5432}
DEVDB_PORT=${PQ_DEVDB_PORT:-55432}
NAME=${PQ_DEVDB_NAME:-}
[[ -z $NAME || $NAME =~ ^[a-z0-9_]+$ ]] || { printf 'devdb: error: PQ_DEVDB_NAME=%s: use lower-case letters, digits and _\n' "$NAME" >&2; exit 2; }
PRIMARY_DIR=$REPO_ROOT/.pgdata${NAME:+-$NAME}

# Never let a dead or firewalled host hang the script.
export PGCONNECT_TIMEOUT=${PGCONNECT_TIMEOUT:-5}

APT_UPDATED=0
URL=

log() { printf 'devdb: %s\n' "$*" >&2; }
die() {
	printf 'devdb: error: %s\n' "$*" >&2
	exit 1
}

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

# redact URL: hide a password in a URL before printing it in a message.
redact() {
	local u=$1
	if [[ $u =~ ^([a-z]+://[^:/@]+):[^@/]*@(.*)$ ]]; then
		u="${BASH_REMATCH[1]}:***@${BASH_REMATCH[2]}"
	fi
	printf '%s' "$u"
}

valid_port() { [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 > 0 && 10#$1 < 65536)); }

is_root() { ((EUID == 0)); }
can_apt() { is_root && command -v apt-get >/dev/null 2>&1; }
is_debian() { [[ -r /etc/debian_version ]] && command -v apt-get >/dev/null 2>&1; }

apt_update() {
	log "running apt-get update"
	DEBIAN_FRONTEND=noninteractive apt-get update -q -o DPkg::Lock::Timeout=300 </dev/null >&2 ||
		die "apt-get update failed (see messages above)"
	APT_UPDATED=1
}

# apt_install PKG...: install Debian packages; if that fails (for instance
# because the package lists are stale or absent), run apt-get update once and
# try again.
apt_install() {
	local -a opts=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=300)
	log "installing with apt-get: $*"
	if DEBIAN_FRONTEND=noninteractive apt-get install "${opts[@]}" "$@" </dev/null >&2; then
		return 0
	fi
	if ((APT_UPDATED == 0)); then
		log "apt-get install failed; refreshing the package lists and retrying"
		apt_update
		if DEBIAN_FRONTEND=noninteractive apt-get install "${opts[@]}" "$@" </dev/null >&2; then
			return 0
		fi
	fi
	die "apt-get install $* failed (see messages above)"
}

# ensure_client: psql and pg_isready are needed for every path.
ensure_client() {
	if command -v psql >/dev/null 2>&1 && command -v pg_isready >/dev/null 2>&1; then
		return 0
	fi
	if can_apt; then
		log "psql/pg_isready not found"
		apt_install postgresql-client
		hash -r
		command -v psql >/dev/null 2>&1 && command -v pg_isready >/dev/null 2>&1 && return 0
	fi
	die "psql and pg_isready are needed but not found: install the PostgreSQL client (Debian: apt-get install postgresql-client)"
}

SERVER_MAJOR=
SERVER_LOCAL=
SERVER_HAS_PGQ=
QUERY_ERROR=

# query_server URL: connect once and read the server's major version, whether
# it runs on this machine (it sees us connect over a unix socket or loopback)
# and whether the pgq extension is available. Returns non-zero, with the error
# in QUERY_ERROR, if the server cannot be queried.
query_server() {
	local out addr
	if ! out=$(psql -X -w -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "
		select current_setting('server_version_num')::int / 10000,
		       coalesce(host(inet_server_addr()), 'socket'),
		       exists (select 1 from pg_available_extensions where name = 'pgq')" 2>&1 </dev/null); then
		QUERY_ERROR=$out
		return 1
	fi
	IFS='|' read -r SERVER_MAJOR addr SERVER_HAS_PGQ <<<"$out"
	case $addr in
	socket | 127.* | ::1) SERVER_LOCAL=yes ;;
	*) SERVER_LOCAL=no ;;
	esac
	[[ $SERVER_MAJOR =~ ^[0-9]+$ ]] || {
		QUERY_ERROR="unexpected answer: $out"
		return 1
	}
}

# ensure_pgq URL: the server at URL (already queried by query_server) must
# offer the pgq extension; install Debian's package for a local server.
ensure_pgq() {
	local url=$1 pkg
	[[ $SERVER_HAS_PGQ == t ]] && return 0
	pkg=postgresql-$SERVER_MAJOR-pgq3
	if [[ $SERVER_LOCAL == yes ]] && can_apt; then
		log "the PgQ extension is not available on the PostgreSQL $SERVER_MAJOR server at $(redact "$url")"
		apt_install "$pkg"
		query_server "$url" || die "cannot query $(redact "$url") after installing $pkg: $QUERY_ERROR"
		[[ $SERVER_HAS_PGQ == t ]] ||
			die "installed $pkg, but the server at $(redact "$url") still does not list pgq in pg_available_extensions; is it Debian's PostgreSQL $SERVER_MAJOR running on this machine (and not in a container)?"
		log "installed $pkg; pgq is now available"
		return 0
	fi
	local how="install the package $pkg on the machine that runs this server (Debian/Ubuntu: apt-get install $pkg; elsewhere build PgQ from source for PostgreSQL $SERVER_MAJOR)"
	if [[ $SERVER_LOCAL == yes ]]; then
		how="run as root: apt-get install $pkg"
	fi
	die "the PostgreSQL $SERVER_MAJOR server at $(redact "$url") does not offer the pgq extension (no row 'pgq' in pg_available_extensions). To fix: $how."
}

# Step 1: DATABASE_URL.
use_database_url() {
	local url=$DATABASE_URL
	query_server "$url" || die "cannot connect to DATABASE_URL=$(redact "$url"):
$QUERY_ERROR
Start that server or fix DATABASE_URL; or unset DATABASE_URL to let this script use a server on 127.0.0.1:$PROBE_PORT or start a throwaway one in .pgdata/."
	ensure_pgq "$url"
	URL=$url
}

# Step 2: a server on 127.0.0.1:$PROBE_PORT, user postgres, trust auth.
# Returns non-zero if nothing usable answers there.
use_probe_port() {
	local url="postgres://postgres@127.0.0.1:$PROBE_PORT/postgres?sslmode=disable" rc=0 i
	pg_isready -q -h 127.0.0.1 -p "$PROBE_PORT" -t 3 || rc=$?
	if ((rc == 1)); then
		# Answers, but is starting up (or shutting down): give it a moment.
		log "the server on 127.0.0.1:$PROBE_PORT is not accepting connections yet; waiting"
		for ((i = 0; i < 30 && rc == 1; i++)); do
			sleep 1
			rc=0
			pg_isready -q -h 127.0.0.1 -p "$PROBE_PORT" -t 3 || rc=$?
		done
	fi
	((rc == 0)) || return 1
	if ! query_server "$url"; then
		log "warning: a server answers on 127.0.0.1:$PROBE_PORT but user postgres cannot use it without a password:"
		log "  ${QUERY_ERROR//$'\n'/ }"
		log "  falling back to a throwaway cluster; set DATABASE_URL to use that server instead"
		return 1
	fi
	ensure_pgq "$url"
	URL=$url
}

# --- Step 3: throwaway cluster ------------------------------------------------

# fallback_dir: where the throwaway cluster lives when the OS user postgres
# cannot reach the repository (e.g. a clone under /root, which is mode 700).
fallback_dir() {
	local sum
	sum=$(printf '%s' "$REPO_ROOT" | cksum)
	printf '%s/partitionq-devdb-%s%s' "${TMPDIR:-/tmp}" "${sum%% *}" "${NAME:+-$NAME}"
}

# as_pg CMD...: run a PostgreSQL server program. initdb, pg_ctl and postgres
# refuse to run as root, so as root they run as the OS user postgres. The
# working directory is / so that it is readable by that user.
as_pg() {
	if is_root; then
		(cd / && runuser -u postgres -- "$@")
	else
		(cd / && "$@")
	fi
}

# pg_bindir_installed: print the bin directory of the newest installed
# PostgreSQL server, or nothing.
pg_bindir_installed() {
	local d best='' bestv=0 v
	for d in /usr/lib/postgresql/*/bin; do
		[[ -x $d/initdb && -x $d/pg_ctl ]] || continue
		v=${d#/usr/lib/postgresql/}
		v=${v%/bin}
		[[ $v =~ ^[0-9]+$ ]] || continue
		if ((v > bestv)); then
			bestv=$v
			best=$d
		fi
	done
	if [[ -z $best ]] && command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		best=$(dirname -- "$(command -v initdb)")
	fi
	printf '%s' "$best"
}

# pg_major BINDIR: major version of the server programs in BINDIR.
pg_major() {
	local v
	v=$("$1/initdb" --version)
	v=${v#*) }
	printf '%s' "${v%%.*}"
}

# install_postgresql: PostgreSQL is not installed at all; install Debian's
# server and the matching PgQ package.
install_postgresql() {
	local bindir major
	if ! (is_root && is_debian); then
		die "no PostgreSQL server answers on 127.0.0.1:$PROBE_PORT and no PostgreSQL server programs (initdb) are installed. Install PostgreSQL and PgQ (Debian: apt-get install postgresql postgresql-<major>-pgq3), or set DATABASE_URL to a server that has PgQ."
	fi
	log "no PostgreSQL server is installed; installing Debian's"
	apt_install postgresql
	hash -r
	bindir=$(pg_bindir_installed)
	[[ -n $bindir ]] || die "installed the package postgresql, but found no /usr/lib/postgresql/*/bin/initdb"
	major=$(pg_major "$bindir")
	apt_install "postgresql-$major-pgq3"
	ensure_client
	# Debian's postinst created a cluster "main" and, where an init system
	# runs, started it. It is left as it is: its pg_hba.conf asks for a
	# password over TCP, so it is of use only if someone configured it.
}

# alive PID: the process exists and is not a zombie.
alive() {
	local st
	[[ $1 =~ ^[0-9]+$ ]] || return 1
	kill -0 "$1" 2>/dev/null || return 1
	if [[ -r /proc/$1/stat ]]; then
		st=$(<"/proc/$1/stat") || return 1
		st=${st##*) }
		[[ $st != Z* ]] || return 1
	fi
}

# running_port DIR: the port of the cluster running from DIR/data, or nothing.
running_port() {
	local pidfile=$1/data/postmaster.pid lines
	[[ -r $pidfile ]] || return 1
	mapfile -t lines <"$pidfile" || return 1
	((${#lines[@]} >= 4)) || return 1
	alive "${lines[0]}" || return 1
	printf '%s' "${lines[3]}"
}

# cluster_bindir DIR: the bin directory that made the cluster in DIR.
cluster_bindir() {
	local dir=$1 b ver
	if [[ -r $dir/bindir ]]; then
		b=$(<"$dir/bindir")
		[[ -x $b/pg_ctl ]] && {
			printf '%s' "$b"
			return 0
		}
	fi
	if [[ -r $dir/data/PG_VERSION ]]; then
		ver=$(<"$dir/data/PG_VERSION")
		[[ -x /usr/lib/postgresql/$ver/bin/pg_ctl ]] && {
			printf '%s' "/usr/lib/postgresql/$ver/bin"
			return 0
		}
	fi
	return 1
}

# init_cluster DIR BINDIR: create a trust-auth cluster in DIR/data.
init_cluster() {
	local dir=$1 bindir=$2 sockdir=$1/run conf
	log "creating a throwaway PostgreSQL $(pg_major "$bindir") cluster in $dir"
	mkdir -p "$dir"
	rm -rf "${dir:?}/data" "$sockdir"
	mkdir -p "$sockdir"
	if is_root; then
		id -u postgres >/dev/null 2>&1 ||
			die "running as root, but there is no OS user postgres to run initdb as (PostgreSQL refuses to run as root); create it or run this script as an ordinary user"
		chown postgres: "$dir" "$sockdir"
	fi
	chmod 0700 "$dir"
	as_pg "$bindir/initdb" -D "$dir/data" --auth=trust --username=postgres \
		--encoding=UTF8 --no-locale --no-sync >"$dir/initdb.log" 2>&1 ||
		die "initdb failed; its output is in $dir/initdb.log:
$(tail -n 20 "$dir/initdb.log")"
	# A unix socket path is limited to about 107 bytes.
	if ((${#sockdir} + 20 > 107)); then
		log "note: $sockdir is too long for a unix socket; the cluster listens on TCP only"
		sockdir=
	fi
	conf="
# --- added by scripts/devdb.sh: throwaway cluster for tests ---
listen_addresses = '127.0.0.1'
port = $DEVDB_PORT
unix_socket_directories = '${sockdir//\'/\'\'}'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
"
	if [[ -e $bindir/../lib/pg_stat_statements.so || -e $bindir/../lib/postgresql/pg_stat_statements.so ]]; then
		conf+="shared_preload_libraries = 'pg_stat_statements'
"
	fi
	# Append as the owner of the file (postgresql.conf belongs to postgres).
	printf '%s' "$conf" | as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
	printf '%s\n' "$bindir" >"$dir/bindir"
}

# port_busy PORT: something listens on 127.0.0.1:PORT.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pick_port: if the default port is taken (say, by the cluster of another
# clone of this repository), use the next free one. An explicit PQ_DEVDB_PORT
# is used as given.
pick_port() {
	local p
	port_busy "$DEVDB_PORT" || return 0
	if [[ -n ${PQ_DEVDB_PORT:-} ]]; then
		die "port $DEVDB_PORT (PQ_DEVDB_PORT) on 127.0.0.1 is already in use; choose another"
	fi
	for ((p = DEVDB_PORT + 1; p <= DEVDB_PORT + 20; p++)); do
		if ! port_busy "$p"; then
			log "note: port $DEVDB_PORT is in use; the throwaway cluster uses port $p"
			DEVDB_PORT=$p
			return 0
		fi
	done
	die "ports $DEVDB_PORT-$((DEVDB_PORT + 20)) on 127.0.0.1 are all in use; set PQ_DEVDB_PORT to a free port"
}

# start_cluster DIR BINDIR: start the cluster in DIR/data on $DEVDB_PORT.
start_cluster() {
	local dir=$1 bindir=$2
	pick_port
	log "starting the throwaway cluster in $dir on 127.0.0.1:$DEVDB_PORT"
	if is_root; then
		touch "$dir/postgresql.log"
		chown postgres: "$dir/postgresql.log"
	fi
	local try pid=
	[[ -r $dir/data/postmaster.pid ]] && read -r pid <"$dir/data/postmaster.pid"
	for try in 1 2 3; do
		# A postmaster that was killed may linger for a moment as a zombie, and
		# so may its children; the new one refuses to start until they are gone.
		if [[ -n $pid ]]; then
			local i
			for ((i = 0; i < 20; i++)); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.5
			done
		fi
		if as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgresql.log" -o "-p $DEVDB_PORT" -w -t 60 start >&2; then
			return 0
		fi
		((try < 3)) && sleep 2
	done
	die "could not start the throwaway cluster in $dir; the end of $dir/postgresql.log:
$(tail -n 20 "$dir/postgresql.log" 2>/dev/null)"
}

use_throwaway() {
	local dir=$PRIMARY_DIR fb bindir port url
	fb=$(fallback_dir)
	if [[ ! -e $PRIMARY_DIR && -e $fb ]]; then
		dir=$fb
	elif [[ ! -e $PRIMARY_DIR ]] && is_root && id -u postgres >/dev/null 2>&1 &&
		! runuser -u postgres -- test -x "$REPO_ROOT" 2>/dev/null; then
		log "note: the OS user postgres cannot reach $REPO_ROOT; the throwaway cluster goes to $fb instead of .pgdata/"
		dir=$fb
	fi

	# Fast path: it is already running.
	if port=$(running_port "$dir"); then
		if [[ $port != "$DEVDB_PORT" ]]; then
			log "note: the throwaway cluster in $dir already runs on port $port (not PQ_DEVDB_PORT=$DEVDB_PORT); using it"
		fi
	else
		if [[ -r $dir/data/PG_VERSION ]]; then
			bindir=$(cluster_bindir "$dir") ||
				die "the cluster in $dir was made by PostgreSQL $(<"$dir/data/PG_VERSION"), whose programs are not installed; run 'scripts/devdb.sh destroy' to start afresh"
		else
			bindir=$(pg_bindir_installed)
			if [[ -z $bindir ]]; then
				install_postgresql
				# Debian's postinst may have started a cluster on the probe port.
				if use_probe_port; then
					return 0
				fi
				bindir=$(pg_bindir_installed)
			fi
			init_cluster "$dir" "$bindir"
		fi
		start_cluster "$dir" "$bindir"
		port=$DEVDB_PORT
	fi
	url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	query_server "$url" || die "the throwaway cluster in $dir does not answer at $url:
$QUERY_ERROR
See $dir/postgresql.log; 'scripts/devdb.sh destroy' deletes it."
	ensure_pgq "$url"
	URL=$url
}

ensure() {
	valid_port "$PROBE_PORT" || die "PQ_DEVDB_PROBE_PORT=$PROBE_PORT is not a port number"
	valid_port "$DEVDB_PORT" || die "PQ_DEVDB_PORT=$DEVDB_PORT is not a port number"
	ensure_client
	if [[ -n ${DATABASE_URL:-} ]]; then
		use_database_url
	elif ! use_probe_port; then
		use_throwaway
	fi
	log "using PostgreSQL $SERVER_MAJOR with PgQ at $(redact "$URL")"
}

stop_clusters() {
	local dir bindir stopped=0
	for dir in "$PRIMARY_DIR" "$(fallback_dir)"; do
		running_port "$dir" >/dev/null || continue
		bindir=$(cluster_bindir "$dir") || die "cannot find the PostgreSQL programs that run the cluster in $dir"
		log "stopping the throwaway cluster in $dir"
		as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >&2
		stopped=1
	done
	((stopped)) || log "no throwaway cluster is running"
}

main() {
	local cmd=${1:-url}
	case $cmd in
	url)
		ensure
		printf '%s\n' "$URL"
		;;
	env)
		ensure
		printf "export DATABASE_URL='%s'\n" "${URL//\'/\'\\\'\'}"
		;;
	stop)
		stop_clusters
		;;
	destroy)
		stop_clusters
		local dir
		for dir in "$PRIMARY_DIR" "$(fallback_dir)"; do
			if [[ -e $dir ]]; then
				log "deleting $dir"
				rm -rf -- "$dir"
			fi
		done
		;;
	help | -h | --help)
		usage
		;;
	*)
		usage >&2
		exit 2
		;;
	esac
}

main "$@"
