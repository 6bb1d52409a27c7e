#!/usr/bin/env bash
# The one test command (README, CI): formatting, lints, docs, and every test — unit,
# conformance, fault and doc tests — against a real Redis and a real PostgreSQL.
#
# Servers: DISTLOCK_REDIS_URL (default redis://127.0.0.1:6379) and DISTLOCK_POSTGRES_URL
# (default postgres://postgres@127.0.0.1:5432/postgres). When the default server is not
# answering, the script starts it (the machine's own service if it has one), or else a
# private server in a temporary directory that is stopped on exit.
# DISTLOCK_REQUIRE_SERVICES defaults to 1 here: a missing server fails, never skips.
set -euo pipefail
cd "$(dirname "$0")/.."

export DISTLOCK_REQUIRE_SERVICES="${DISTLOCK_REQUIRE_SERVICES:-1}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
scratch="$(mktemp -d -t distlock-test.XXXXXX)"
chmod 755 "$scratch"
cleanup() {
  [ -f "$scratch/redis.pid" ] && kill "$(cat "$scratch/redis.pid")" 2>/dev/null || true
  if [ -d "$scratch/pgdata" ]; then as_postgres pg_ctl -D "$scratch/pgdata" -m immediate stop >/dev/null 2>&1 || true; fi
  rm -rf "$scratch"
}
trap cleanup EXIT

step() { printf '\n==> %s\n' "$*"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pg_bin() {
  local found
  found="$(command -v "$1" 2>/dev/null || true)"
  [ -z "$found" ] && found="$(ls /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n1)"
  echo "$found"
}

redis_up() { redis-cli -u "$1" ping 2>/dev/null | grep -q PONG; }
ensure_redis() {
  if [ -n "${DISTLOCK_REDIS_URL:-}" ]; then
    redis_up "$DISTLOCK_REDIS_URL" || { echo "DISTLOCK_REDIS_URL=$DISTLOCK_REDIS_URL does not answer PING" >&2; exit 1; }
    return
  fi
  export DISTLOCK_REDIS_URL="redis://127.0.0.1:6379"
  redis_up "$DISTLOCK_REDIS_URL" && return
  command -v redis-server >/dev/null || { echo "redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
  local port; port="$(free_port)"
  echo "Redis is not running on 6379: starting a private redis-server on port $port"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$scratch" \
    --daemonize yes --pidfile "$scratch/redis.pid" --logfile "$scratch/redis.log"
  export DISTLOCK_REDIS_URL="redis://127.0.0.1:$port"
  for _ in $(seq 50); do redis_up "$DISTLOCK_REDIS_URL" && return; sleep 0.1; done
  echo "the private redis-server did not start:" >&2; cat "$scratch/redis.log" >&2; exit 1
}

pg_up() { psql "$1" -qtAc 'select 1' >/dev/null 2>&1; }
ensure_postgres() {
  if [ -n "${DISTLOCK_POSTGRES_URL:-}" ]; then
    pg_up "$DISTLOCK_POSTGRES_URL" || { echo "DISTLOCK_POSTGRES_URL does not accept connections" >&2; exit 1; }
    return
  fi
  export DISTLOCK_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/postgres"
  pg_up "$DISTLOCK_POSTGRES_URL" && return
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ] && [ "$(id -u)" = 0 ]; then
    echo "PostgreSQL is not running: starting the machine's cluster"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 50); do pg_up "$DISTLOCK_POSTGRES_URL" && return; sleep 0.2; done
  fi
  local initdb pg_ctl port
  initdb="$(pg_bin initdb)"; pg_ctl="$(pg_bin pg_ctl)"
  [ -n "$initdb" ] && [ -n "$pg_ctl" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 1; }
  port="$(free_port)"
  echo "PostgreSQL is not running on 5432: starting a private cluster on port $port"
  mkdir -p "$scratch/pgdata" && chown postgres "$scratch/pgdata" 2>/dev/null || true
  as_postgres "$initdb" -D "$scratch/pgdata" -U postgres --auth=trust -E UTF8 >/dev/null
  as_postgres "$pg_ctl" -D "$scratch/pgdata" -o "-p $port -k $scratch -c listen_addresses=127.0.0.1 -c fsync=off" \
    -l "$scratch/pgdata/log" -w start >/dev/null
  export DISTLOCK_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
  pg_up "$DISTLOCK_POSTGRES_URL" || { echo "the private PostgreSQL did not start" >&2; exit 1; }
}

step "servers"
ensure_redis
ensure_postgres
echo "DISTLOCK_REDIS_URL=$DISTLOCK_REDIS_URL"
echo "DISTLOCK_POSTGRES_URL=$DISTLOCK_POSTGRES_URL"

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, all features, warnings denied)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo doc (warnings denied)"
RUSTDOCFLAGS="-Dwarnings" cargo doc --workspace --all-features --no-deps

step "tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --all-features --no-fail-fast --final-status-level fail
else
  echo "cargo-nextest not found: using cargo test"
  cargo test --workspace --all-features --no-fail-fast --lib --bins --tests --examples
fi

step "feature sets other than --all-features (what most users build)"
cargo check -q -p distlock-api -p distlock --no-default-features
cargo test -q -p distlock --lib --tests

step "doc tests"
cargo test --workspace --all-features --doc

step "examples"
cargo run -q -p distlock --example contention
