#!/usr/bin/env bash
# The one test command (README, CI): formatting, lints, docs, and every test — unit,
# conformance, fault and doc tests — against a real Redis, a real PostgreSQL, a real MariaDB and
# a real etcd.
#
# Servers: by default the script starts its own — a `redis-server`, a freshly initialised
# PostgreSQL (`initdb`) and MariaDB (`mariadb-install-db`, data in /dev/shm) on free
# loopback ports, in a temporary directory — and
# stops them and removes the directory on exit (also after a failing step or Ctrl-C), so
# no result depends on what earlier runs or other users left in a server. The machine's
# own services (6379, 5432, 3306) are never used unless named:
#   DISTLOCK_REDIS_URL=redis://…      use this Redis instead of a private one
#   DISTLOCK_POSTGRES_URL=postgres://… use this PostgreSQL instead of a private one
#   DISTLOCK_MYSQL_URL=mysql://user[:password]@host[:port]/database
#                                      use this MySQL or MariaDB instead of a private one
#                                      (the user creates tables in that database)
#   DISTLOCK_ETCD_URL=etcd://host:port  use this etcd instead of a private one (a single
#                                      `etcd` node, data in /dev/shm)
# Building the etcd store needs `protoc` (its gRPC client compiles etcd's protos); the
# script installs `protobuf-compiler` too when it is missing, and `lua-check` (luacheck,
# which lints the Redis store's Lua scripts in its unit tests).
# A missing `redis-server`, `initdb` or `mariadbd` is installed with apt-get when the script runs as
# root (DISTLOCK_TEST_INSTALL=0 turns that off); otherwise it says what to install.
#
# DISTLOCK_REQUIRE_SERVICES defaults to 1 here: a missing server fails, never skips.
# DISTLOCK_TEST_STEPS picks steps (default: all of fmt cycles clippy doc tests features
# doctests examples package deny); `DISTLOCK_TEST_STEPS=servers` only starts the servers, prints
# them, and stops. `package` packs every published crate as `cargo publish` would and
# builds the packed sources; `deny` checks dependency licenses and duplicate versions with
# cargo-deny (installed from crates.io with `cargo install` when missing).
# With arguments, the script runs that command with the servers up instead of the steps:
#   scripts/test.sh cargo nextest run -p distlock-postgres --all-features
set -euo pipefail
cd "$(dirname "$0")/.."

export DISTLOCK_REQUIRE_SERVICES="${DISTLOCK_REQUIRE_SERVICES:-1}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
steps=" ${DISTLOCK_TEST_STEPS:-fmt cycles clippy doc tests features doctests examples package deny} "
steps="${steps//,/ }"

# Each step line shows the seconds since the script started (CI logs: where time goes).
step() { printf '\n==> %s   [%ss]\n' "$*" "$SECONDS"; }
fail() { printf 'scripts/test.sh: %s\n' "$*" >&2; exit 1; }
wants() { [[ "$steps" == *" $1 "* ]]; }
for name in $steps; do
  case "$name" in
    servers | fmt | cycles | clippy | doc | tests | features | doctests | examples | package | deny) ;;
    *) fail "unknown step \`$name\` in DISTLOCK_TEST_STEPS (steps: servers fmt cycles clippy doc tests features doctests examples package deny)" ;;
  esac
done
# A URL as printed: any password replaced by `***`.
shown() { sed -E 's#(://[^/@:]*:)[^/@]*@#\1***@#' <<<"$1"; }

# ---------------------------------------------------------------------------------------
# Private servers: everything lives in $scratch and dies with the script.

scratch=""
redis_pid=""
etcd_pid=""
etcd_data=""
pg_ctl=""
pgdata=""
mysql_pid=""
mysql_data=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  if [ -n "$etcd_pid" ]; then
    kill "$etcd_pid" 2>/dev/null || true
    wait "$etcd_pid" 2>/dev/null || true
  fi
  if [ -n "$etcd_data" ]; then rm -rf "$etcd_data"; fi
  if [ -n "$mysql_pid" ]; then
    kill -9 "$mysql_pid" 2>/dev/null || true
    wait "$mysql_pid" 2>/dev/null || true
  fi
  if [ -n "$mysql_data" ]; then rm -rf "$mysql_data"; fi
  if [ -n "$pgdata" ] && [ -f "$pgdata/postmaster.pid" ]; then
    as_postgres "$pg_ctl" -D "$pgdata" -m immediate -w -t 30 stop >/dev/null 2>&1 \
      || kill -9 "$(head -n1 "$pgdata/postmaster.pid")" 2>/dev/null || true
  fi
  [ -n "$scratch" ] && rm -rf "$scratch"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Runs a command as the `postgres` user when the script runs as root (PostgreSQL refuses
# to run as root), from a directory that user can enter.
as_postgres() {
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# A port on 127.0.0.1 nobody listens on, from 20000–32767: below Linux's ephemeral range
# (32768+), so no outgoing connection is given it in the meantime. Another process may
# still take it before the server binds: the callers retry with a new port when the
# server reports the address in use.
free_port() {
  local port
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 12768))
    # A successful connect means someone listens there.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  fail "found no free port in 20000-32767"
}

# The directory holding initdb, pg_ctl and postgres of one PostgreSQL version (the newest
# installed), or nothing.
pg_bindir() {
  local found dir
  found="$(command -v initdb 2>/dev/null || true)"
  if [ -n "$found" ]; then
    dir="$(dirname "$(readlink -f "$found")")"
    [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ] && { echo "$dir"; return; }
  fi
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ] && { echo "$dir"; return; }
  done
}

# Installs the Debian packages `$@` when run as root with apt-get, or says exactly what to
# install and stops.
install_or_explain() {
  local what="$*"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ "${DISTLOCK_TEST_INSTALL:-1}" != 0 ]; then
    step "installing $what (apt-get; DISTLOCK_TEST_INSTALL=0 turns this off)"
    if DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"; then
      return
    fi
    fail "could not install $what: run \`apt-get update && apt-get install -y $what\` by hand, or set DISTLOCK_REDIS_URL / DISTLOCK_POSTGRES_URL / DISTLOCK_MYSQL_URL / DISTLOCK_ETCD_URL to servers of your own"
  fi
  fail "the tests need their own servers and tools; install them with \`sudo apt-get install $what\` (Debian/Ubuntu), or set DISTLOCK_REDIS_URL / DISTLOCK_POSTGRES_URL / DISTLOCK_MYSQL_URL / DISTLOCK_ETCD_URL to servers of your own"
}

# Bounded: whatever listens on a port may accept and never answer.
redis_ping() { timeout 5 redis-cli -u "$1" ping 2>/dev/null | grep -q PONG; }
# etcd's JSON gateway: `/health` answers {"health":"true"} once the member sees a leader.
etcd_healthy() {
  local hostport="${1#etcd://}"
  hostport="${hostport%%[/?]*}"
  hostport="${hostport%%,*}"
  timeout 5 bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1##*:}" && printf "GET /health HTTP/1.0\r\n\r\n" >&3 && cat <&3' _ "$hostport" 2>/dev/null \
    | grep -q '"health":"true"'
}
pg_query() { PGCONNECT_TIMEOUT=5 timeout 10 psql "$1" -qtAX -c "$2" 2>/dev/null; }
# One query with the `mariadb` client against mysql://user[:password]@host[:port]/database.
mysql_query() {
  local url="${1#*://}" auth hostport user password host port database
  [[ "$url" == *@* ]] && auth="${url%%@*}" && url="${url#*@}"
  user="${auth%%:*}"
  [[ "$auth" == *:* ]] && password="${auth#*:}"
  hostport="${url%%/*}"
  database="${url#*/}"
  [[ "$url" == */* ]] || database=""
  database="${database%%\?*}"
  host="${hostport%%:*}"
  port="${hostport##*:}"
  [[ "$hostport" == *:* ]] || port=3306
  MYSQL_PWD="${password:-}" timeout 10 mariadb --protocol=tcp -h "$host" -P "$port" -u "${user:-root}" \
    --connect-timeout=5 -N -B -e "$2" ${database:+"$database"} 2>/dev/null
}
mysql_server_bin() { command -v mariadbd 2>/dev/null || { [ -x /usr/sbin/mariadbd ] && echo /usr/sbin/mariadbd; }; }

make_scratch() {
  [ -n "$scratch" ] && return
  scratch="$(mktemp -d -t distlock-test.XXXXXX)"
  # Traversable (not listable) by the postgres user, which runs the private PostgreSQL.
  chmod 711 "$scratch"
}

start_redis() {
  local port dir log attempt
  make_scratch
  dir="$scratch/redis"
  mkdir -p "$dir"
  log="$dir/redis.log"
  for attempt in 1 2 3 4 5; do
    port="$(free_port)"
    : >"$log"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
      --logfile "$log" --daemonize no --protected-mode yes >>"$log" 2>&1 </dev/null &
    redis_pid=$!
    for _ in $(seq 150); do # up to 15 s
      if ! kill -0 "$redis_pid" 2>/dev/null; then break; fi
      # PONG from our own process (not from whoever else may have the port).
      if timeout 2 redis-cli -h 127.0.0.1 -p "$port" info server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$redis_pid"; then
        export DISTLOCK_REDIS_URL="redis://127.0.0.1:$port"
        return
      fi
      sleep 0.1
    done
    local what="did not answer on port $port within 15 s"
    kill -0 "$redis_pid" 2>/dev/null || what="exited"
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
    if grep -qi "address already in use" "$log" && [ "$attempt" -lt 5 ]; then
      echo "port $port was taken meanwhile; trying another"
      continue
    fi
    echo "--- $log" >&2
    cat "$log" >&2
    fail "the private redis-server $what (log above)"
  done
}

# One etcd member; its data lives in /dev/shm (tmpfs) when there is one, so a write's
# fsync costs nothing. 50 ms heartbeat / 500 ms election timeout, as in the test kit: the
# server's minimum lease TTL is then one second.
start_etcd() {
  local client peer log attempt base
  make_scratch
  base="$scratch"
  [ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
  etcd_data="$(mktemp -d "$base/distlock-etcd.XXXXXX")"
  log="$scratch/etcd.log"
  for attempt in 1 2 3 4 5; do
    client="$(free_port)"
    peer="$(free_port)"
    : >"$log"
    rm -rf "$etcd_data/data"
    etcd --name test --data-dir "$etcd_data/data" \
      --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "test=http://127.0.0.1:$peer" --heartbeat-interval 50 --election-timeout 500 \
      --logger zap --log-level warn --log-outputs stderr >>"$log" 2>&1 </dev/null &
    etcd_pid=$!
    for _ in $(seq 150); do # up to 15 s
      if ! kill -0 "$etcd_pid" 2>/dev/null; then break; fi
      if etcd_healthy "127.0.0.1:$client"; then
        export DISTLOCK_ETCD_URL="etcd://127.0.0.1:$client"
        return
      fi
      sleep 0.1
    done
    local what="did not become healthy on port $client within 15 s"
    kill -0 "$etcd_pid" 2>/dev/null || what="exited"
    kill "$etcd_pid" 2>/dev/null || true
    wait "$etcd_pid" 2>/dev/null || true
    etcd_pid=""
    if grep -qi "address already in use" "$log" && [ "$attempt" -lt 5 ]; then
      echo "port $client or $peer was taken meanwhile; trying others"
      continue
    fi
    echo "--- $log" >&2
    cat "$log" >&2
    fail "the private etcd $what (log above)"
  done
}

# MariaDB in /dev/shm (tmpfs) when there is one: a throw-away server tuned for a test load
# (no binary log, no flush at commit), as root when the script runs as root. The URL
# names the database `distlock`, created here.
start_mysql() {
  local bin port log attempt base answered
  bin="$(mysql_server_bin)"
  make_scratch
  base="$scratch"
  [ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
  mysql_data="$(mktemp -d "$base/distlock-mysql.XXXXXX")"
  # A temporary directory of its own: the shared /tmp is cleaned by others.
  mkdir "$mysql_data/tmp"
  local user=()
  [ "$(id -u)" = 0 ] && user=(--user=root)
  if ! mariadb-install-db --no-defaults --datadir="$mysql_data/data" --tmpdir="$mysql_data/tmp" \
    --auth-root-authentication-method=normal --skip-test-db "${user[@]}" >"$mysql_data/install.log" 2>&1; then
    cat "$mysql_data/install.log" >&2
    fail "mariadb-install-db failed (output above)"
  fi
  log="$mysql_data/error.log"
  for attempt in 1 2 3 4 5; do
    port="$(free_port)"
    rm -f "$log"
    "$bin" --no-defaults --datadir="$mysql_data/data" --tmpdir="$mysql_data/tmp" --port="$port" --bind-address=127.0.0.1 \
      --socket="$mysql_data/mysqld.sock" --pid-file="$mysql_data/mysqld.pid" --log-error="$log" \
      --skip-log-bin --skip-name-resolve --innodb-flush-log-at-trx-commit=0 --innodb-buffer-pool-size=256M \
      --max-connections="$(pg_max_connections)" "${user[@]}" </dev/null >/dev/null 2>&1 &
    mysql_pid=$!
    for _ in $(seq 300); do # up to 30 s
      if ! kill -0 "$mysql_pid" 2>/dev/null; then break; fi
      # Our own server answers there, not whoever else may have the port.
      answered="$(mysql_query "mysql://root@127.0.0.1:$port" 'SELECT @@datadir' || true)"
      if [ "${answered%/}" = "$mysql_data/data" ]; then
        mysql_query "mysql://root@127.0.0.1:$port" 'CREATE DATABASE IF NOT EXISTS distlock' >/dev/null \
          || fail "could not create the database distlock in the private MariaDB"
        export DISTLOCK_MYSQL_URL="mysql://root@127.0.0.1:$port/distlock"
        return
      fi
      sleep 0.1
    done
    local what="did not answer on port $port within 30 s"
    kill -0 "$mysql_pid" 2>/dev/null || what="exited"
    kill -9 "$mysql_pid" 2>/dev/null || true
    wait "$mysql_pid" 2>/dev/null || true
    mysql_pid=""
    if grep -qi "already in use" "$log" 2>/dev/null && [ "$attempt" -lt 5 ]; then
      echo "port $port was taken meanwhile; trying another"
      continue
    fi
    echo "--- $log" >&2
    cat "$log" >&2 || true
    fail "the private MariaDB $what (log above)"
  done
}

# Connections the suite opens at once: a test holds at most ~40 PostgreSQL connections
# (four `distlock run` processes, each a pool of up to 8 plus a LISTEN connection); nextest
# runs 4 tests at a time, `cargo test` one per core. Room for twice that, and for backends
# of finished tests still closing.
pg_max_connections() {
  local cores
  cores="$(nproc 2>/dev/null || echo 4)"
  [ "$cores" -lt 4 ] && cores=4
  echo $((100 + 80 * cores))
}

# A test holds at most about 45 PostgreSQL connections (four `distlock run` processes of
# up to 9 each, besides its own pools): on a server of yours with less room than the
# default 4 tests at a time need (a stock server allows 100), run fewer at once — unless
# NEXTEST_TEST_THREADS says how many.
pg_bound_parallelism() {
  local room threads
  [ -z "${NEXTEST_TEST_THREADS:-}" ] || return 0
  room="$(pg_query "$DISTLOCK_POSTGRES_URL" "SELECT current_setting('max_connections')::int \
    - current_setting('superuser_reserved_connections')::int - (SELECT count(*) FROM pg_stat_activity)")"
  [[ "$room" =~ ^[0-9]+$ ]] || return 0
  threads=$((room / 45))
  [ "$threads" -ge 1 ] || threads=1
  if [ "$threads" -lt 4 ]; then
    export NEXTEST_TEST_THREADS="$threads"
    echo "  it has room for $room more connections: $threads test(s) at a time (NEXTEST_TEST_THREADS=$threads; a test holds up to about 45)"
  fi
}

start_postgres() {
  local bindir dir port log attempt url answered
  bindir="$(pg_bindir)"
  [ -n "$bindir" ] || fail "PostgreSQL's initdb was not found (looked on PATH and in /usr/lib/postgresql/*/bin)"
  make_scratch
  dir="$scratch/postgres"
  pgdata="$dir/data"
  log="$dir/postgres.log"
  pg_ctl="$bindir/pg_ctl"
  mkdir -m 700 "$dir"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || fail "running as root, but there is no \`postgres\` user to run PostgreSQL as (apt-get install postgresql creates it)"
    chown postgres: "$dir"
    as_postgres test -w "$dir" || fail "the postgres user cannot reach $dir; set TMPDIR to a directory it can enter (e.g. /tmp)"
  fi
  if ! as_postgres "$bindir/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --locale=C \
    --no-sync --no-instructions >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    fail "initdb failed (output above)"
  fi
  # A throw-away cluster tuned for a test load: no durability, enough connections.
  cat >>"$pgdata/postgresql.conf" <<EOF

# scripts/test.sh: a private, throw-away test server
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
max_connections = $(pg_max_connections)
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = minimal
max_wal_senders = 0
max_wal_size = 1GB
checkpoint_timeout = 30min
EOF
  for attempt in 1 2 3 4 5; do
    port="$(free_port)"
    rm -f "$log"
    if as_postgres "$pg_ctl" -D "$pgdata" -o "-p $port" -l "$log" -w -t 60 start >/dev/null 2>&1; then
      url="postgres://postgres@127.0.0.1:$port/postgres"
      # Our own cluster answers there, not whoever else may have the port.
      answered="$(pg_query "$url" 'SHOW data_directory' || true)"
      if [ "$answered" = "$pgdata" ] || [ "$answered" = "$(readlink -f "$pgdata")" ]; then
        export DISTLOCK_POSTGRES_URL="$url"
        return
      fi
      echo "--- $log" >&2
      cat "$log" >&2
      fail "the private PostgreSQL started but port $port answers for another server"
    fi
    as_postgres "$pg_ctl" -D "$pgdata" -m immediate stop >/dev/null 2>&1 || true
    if grep -qi "address already in use" "$log" && [ "$attempt" -lt 5 ]; then
      echo "port $port was taken meanwhile; trying another"
      continue
    fi
    echo "--- $log" >&2
    cat "$log" >&2
    fail "the private PostgreSQL did not start on port $port within 60 s (log above)"
  done
}

servers() {
  local missing=()
  if [ -z "${DISTLOCK_REDIS_URL:-}" ]; then
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null || missing+=(redis-server)
  fi
  if [ -z "${DISTLOCK_POSTGRES_URL:-}" ]; then
    [ -n "$(pg_bindir)" ] && command -v psql >/dev/null || missing+=(postgresql)
  fi
  # The kit's private MariaDB (fault tests) needs the binaries even with DISTLOCK_MYSQL_URL.
  { [ -n "$(mysql_server_bin)" ] && command -v mariadb-install-db >/dev/null && command -v mariadb >/dev/null; } \
    || missing+=(mariadb-server mariadb-client)
  # The kit's three-member clusters (fault tests) need the binary even with DISTLOCK_ETCD_URL.
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v protoc >/dev/null || [ -n "${PROTOC:-}" ] || missing+=(protobuf-compiler)
  # distlock-redis lints its Lua scripts with luacheck.
  command -v luacheck >/dev/null || missing+=(lua-check)
  # The SQLite store's wall-clock test runs a child under libfaketime.
  compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null || [ -e /usr/lib/faketime/libfaketime.so.1 ] || missing+=(faketime)
  [ "${#missing[@]}" = 0 ] || install_or_explain "${missing[@]}"

  if [ -n "${DISTLOCK_REDIS_URL:-}" ]; then
    redis_ping "$DISTLOCK_REDIS_URL" || fail "DISTLOCK_REDIS_URL=$(shown "$DISTLOCK_REDIS_URL") does not answer PING"
    echo "DISTLOCK_REDIS_URL=$(shown "$DISTLOCK_REDIS_URL") (yours)"
  else
    start_redis
    echo "DISTLOCK_REDIS_URL=$DISTLOCK_REDIS_URL (private redis-server, pid $redis_pid, in $scratch/redis)"
  fi
  if [ -n "${DISTLOCK_POSTGRES_URL:-}" ]; then
    pg_query "$DISTLOCK_POSTGRES_URL" 'SELECT 1' >/dev/null \
      || fail "DISTLOCK_POSTGRES_URL=$(shown "$DISTLOCK_POSTGRES_URL") does not accept connections"
    echo "DISTLOCK_POSTGRES_URL=$(shown "$DISTLOCK_POSTGRES_URL") (yours)"
    pg_bound_parallelism
  else
    start_postgres
    echo "DISTLOCK_POSTGRES_URL=$DISTLOCK_POSTGRES_URL (private PostgreSQL $(pg_query "$DISTLOCK_POSTGRES_URL" 'SHOW server_version'), in $scratch/postgres)"
  fi
  if [ -n "${DISTLOCK_MYSQL_URL:-}" ]; then
    mysql_query "$DISTLOCK_MYSQL_URL" 'SELECT 1' >/dev/null \
      || fail "DISTLOCK_MYSQL_URL=$(shown "$DISTLOCK_MYSQL_URL") does not accept connections"
    echo "DISTLOCK_MYSQL_URL=$(shown "$DISTLOCK_MYSQL_URL") (yours)"
  else
    start_mysql
    echo "DISTLOCK_MYSQL_URL=$DISTLOCK_MYSQL_URL (private MariaDB $(mysql_query "$DISTLOCK_MYSQL_URL" 'SELECT VERSION()'), pid $mysql_pid, data in $mysql_data)"
  fi
  if [ -n "${DISTLOCK_ETCD_URL:-}" ]; then
    etcd_healthy "$DISTLOCK_ETCD_URL" || fail "DISTLOCK_ETCD_URL=$DISTLOCK_ETCD_URL does not answer /health"
    echo "DISTLOCK_ETCD_URL=$DISTLOCK_ETCD_URL (yours)"
  else
    start_etcd
    echo "DISTLOCK_ETCD_URL=$DISTLOCK_ETCD_URL (private etcd $(etcd --version | sed -n 's/^etcd Version: //p'), pid $etcd_pid, data in $etcd_data)"
  fi
  # The conformance suites of the Redis Cluster, Sentinel and Redlock stores share one
  # deployment each for this run, started by the first test that needs it and killed by
  # its watchdogs when this script ends (distlock_conformance::kit::shared). Fault tests
  # start their own.
  make_scratch
  export DISTLOCK_KIT_SHARED_DIR="$scratch/shared" DISTLOCK_KIT_OWNER_PID="$$"
}

# The published crates as `cargo publish` would upload them, in dependency order, without
# a registry: `cargo package` packs each (resolving the others from the packs made before
# it), then one `cargo check` builds the unpacked sources as a workspace of their own, each
# crate's dependencies on the others patched to the packs. What this catches: a file the
# sources need but the package leaves out, a manifest that only works inside this
# workspace, a published crate depending on an unpublished one. The packed crates are not
# built once per crate (`cargo package` without `--no-verify`): the sources are the ones
# the other steps build, and the check reuses their compiled dependencies.
package_check() {
  local unpacked crate members=() patches=()
  rm -rf target/package
  cargo package --workspace --no-verify --allow-dirty --locked --offline
  unpacked="$(mktemp -d -t distlock-package.XXXXXX)"
  for crate in target/package/*.crate; do
    tar -xzf "$crate" -C "$unpacked"
    crate="$(basename "$crate" .crate)"
    members+=("\"$crate\"")
    patches+=("${crate%-*} = { path = \"$crate\" }")
  done
  {
    echo '[workspace]'
    echo 'resolver = "2"'
    echo "members = [$(IFS=,; echo "${members[*]}")]"
    echo
    echo '[patch.crates-io]'
    printf '%s\n' "${patches[@]}"
    echo
    # The same profiles as this workspace, so the check reuses its compiled dependencies.
    sed -n '/^\[profile/,$p' Cargo.toml
  } >"$unpacked/Cargo.toml"
  cp Cargo.lock "$unpacked/"
  (cd "$unpacked" && CARGO_TARGET_DIR="$OLDPWD/target" cargo check --workspace --all-features --offline)
  rm -rf "$unpacked"
}

# The declared MSRV (`rust-version` in Cargo.toml) against the dependencies: no crate that
# a published crate builds with (normal and build dependencies, every feature, as locked)
# may declare a newer `rust-version`. Clippy's `incompatible_msrv` lint (on by default,
# reading the same `rust-version`) covers the standard library APIs the code itself uses.
msrv_check() {
  cargo metadata --format-version 1 --locked --all-features | python3 -c '
import json, sys
meta = json.load(sys.stdin)
packages = {p["id"]: p for p in meta["packages"]}
version = lambda v: tuple(int(x) for x in ((v or "0") + ".0.0").split(".")[:3])
ours = {p["id"] for p in meta["packages"] if p["source"] is None and p["publish"] != []}
msrv = max(version(packages[i]["rust_version"]) for i in ours)
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
seen, todo, newer = set(), list(ours), []
while todo:
    node = nodes[todo.pop()]
    for dep in node["deps"]:
        if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]) and dep["pkg"] not in seen:
            seen.add(dep["pkg"])
            todo.append(dep["pkg"])
for i in seen:
    p = packages[i]
    if version(p["rust_version"]) > msrv:
        newer.append("%s %s needs Rust %s" % (p["name"], p["version"], p["rust_version"]))
declared = ".".join(map(str, msrv[:2]))
if newer:
    sys.exit(f"rust-version {declared} is too low for: " + "; ".join(sorted(newer)))
print(f"rust-version {declared}: every dependency of the published crates builds with it ({len(seen)} crates)")
'
}

# cargo-deny, installed into ~/.cargo/bin from crates.io when missing.
ensure_cargo_deny() {
  command -v cargo-deny >/dev/null && return
  [ -x "$HOME/.cargo/bin/cargo-deny" ] && export PATH="$HOME/.cargo/bin:$PATH" && return
  [ "${DISTLOCK_TEST_INSTALL:-1}" != 0 ] \
    || fail "the \`deny\` step needs cargo-deny: \`cargo install cargo-deny --locked\`"
  step "installing cargo-deny (cargo install; DISTLOCK_TEST_INSTALL=0 turns this off)"
  cargo install cargo-deny --locked \
    || fail "could not install cargo-deny: run \`cargo install cargo-deny --locked\` by hand"
  export PATH="$HOME/.cargo/bin:$PATH"
}

step "servers"
servers

if [ "$#" -gt 0 ]; then
  step "$*"
  "$@"
  exit
fi

if wants fmt; then
  step "cargo fmt --check"
  cargo fmt --all -- --check
fi

if wants cycles; then
  step "import cycles between the modules of a crate (scripts/check-cycles.py)"
  python3 scripts/check-cycles.py
fi

if wants clippy; then
  step "cargo clippy (all targets, all features, warnings denied)"
  cargo clippy --workspace --all-targets --all-features -- -D warnings
fi

if wants doc; then
  step "cargo doc (warnings denied)"
  RUSTDOCFLAGS="-Dwarnings" cargo doc --workspace --all-features --no-deps
fi

if wants tests; then
  step "tests"
  if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --all-features --no-fail-fast --final-status-level fail
  else
    echo "cargo-nextest not found: using cargo test"
    cargo test --workspace --all-features --no-fail-fast --lib --bins --tests --examples
  fi
fi

if wants features; then
  step "feature sets other than --all-features (what most users build)"
  cargo check -q -p distlock-api -p distlock --no-default-features
  # The default features (memory only): the library's tests, among them the `connect`
  # errors of disabled stores (the integration tests ran above, with every feature).
  cargo test -q -p distlock --lib
fi

if wants doctests; then
  step "doc tests"
  cargo test --workspace --all-features --doc
fi

if wants examples; then
  step "examples"
  cargo run -q -p distlock --example contention
  DATABASE_URL="$DISTLOCK_POSTGRES_URL" cargo run -q -p distlock --features optimistic --example optimistic
fi
if wants package; then
  step "package: every published crate packed and its packed sources built"
  package_check
  step "msrv: the declared rust-version against the dependencies"
  msrv_check
fi

if wants deny; then
  ensure_cargo_deny
  step "cargo deny: dependency licenses and duplicate versions (deny.toml)"
  # The graph covers every platform: fetch what this machine has not downloaded yet
  # (from the registry); the checks themselves fetch nothing.
  cargo fetch --locked -q
  cargo deny --offline check licenses bans
fi
step "done"
