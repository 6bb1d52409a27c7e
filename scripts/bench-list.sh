#!/usr/bin/env bash
# `distlock list` on 100,000 held locks (BENCHMARKS.md, "Listing held locks"), beside the
# server's own listing commands, on the servers of scripts/test.sh:
#   scripts/test.sh scripts/bench-list.sh [COUNT] [ROUNDS]
# Needs redis-cli, psql and python3. Writes only under its own Redis prefix
# (`distlock-bench-list`) and its own table (`public.distlock_bench_list`), and removes
# both at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

count="${1:-100000}"
rounds="${2:-3}"
: "${DISTLOCK_REDIS_URL:?run under scripts/test.sh, or set DISTLOCK_REDIS_URL}"
: "${DISTLOCK_POSTGRES_URL:?run under scripts/test.sh, or set DISTLOCK_POSTGRES_URL}"
cargo build --release -q -p distlock-cli
distlock="${CARGO_TARGET_DIR:-target}/release/distlock"

redis_store="$DISTLOCK_REDIS_URL?prefix=distlock-bench-list"
pg_store="$DISTLOCK_POSTGRES_URL?table=distlock_bench_list"
rcli() { redis-cli -u "$DISTLOCK_REDIS_URL" "$@"; }
seconds() { local start=$EPOCHREALTIME; "$@" >/dev/null; awk "BEGIN { printf \"%.2f\", $EPOCHREALTIME - $start }"; }

# The store's own layout: `{prefix}:lock:{key}` = a UUID v4 with an expiry; one row per
# lease with a token, a fence and an expiry.
python3 -c "
import uuid
for i in range($count):
    print(f'SET distlock-bench-list:lock:held:{i} {uuid.uuid4()} PX 900000')
" | rcli --pipe >/dev/null
"$distlock" --store "$pg_store" list --match nothing >/dev/null # creates the table
psql -q "$DISTLOCK_POSTGRES_URL" -c "
  INSERT INTO public.distlock_bench_list (key, token, fence, expires_at)
  SELECT 'lock:held:' || i, gen_random_uuid()::text, nextval('public.distlock_fence_seq'),
         clock_timestamp() + interval '15 minutes'
  FROM generate_series(0, $count - 1) AS i;
  ANALYZE public.distlock_bench_list;"

echo "seconds per listing of $count held locks, $rounds rounds (distlock list --format json; PostgreSQL: one COPY of the same rows)"
for round in $(seq "$rounds"); do
  redis_list=$(seconds "$distlock" --store "$redis_store" list --match 'held:*' --format json)
  pg_list=$(seconds "$distlock" --store "$pg_store" list --match 'held:*' --format json)
  pg_raw=$(seconds psql -q "$DISTLOCK_POSTGRES_URL" -c "COPY (SELECT key, token, fence,
      expires_at - clock_timestamp() FROM public.distlock_bench_list
      WHERE key LIKE 'lock:held:%' AND token IS NOT NULL AND expires_at > clock_timestamp()
      ORDER BY key) TO STDOUT")
  echo "round $round: redis $redis_list · postgres $pg_list (one COPY: $pg_raw)"
done

# How long the Redis server spent on each command of a listing (every command is
# logged): other clients wait at most that long. Beside: one KEYS of the same keys.
rcli config set slowlog-log-slower-than 0 >/dev/null
rcli config set slowlog-max-len 1000000 >/dev/null
for page in 1000 10000; do
  rcli slowlog reset >/dev/null
  "$distlock" --store "$redis_store" list --match 'held:*' --page-size "$page" --format json >/dev/null
  spent=$(rcli --json slowlog get 1000000 | python3 -c '
import json, sys
times = sorted(e[2] for e in json.load(sys.stdin) if e[3][0].upper() in ("SCAN", "EVALSHA", "EVAL"))
print(f"{len(times)} SCAN/EVALSHA; µs per command: median {times[len(times) // 2]}, "
      f"p90 {times[len(times) * 9 // 10]}, max {times[-1]}")')
  echo "redis, --page-size $page: $spent"
done
rcli slowlog reset >/dev/null
rcli keys 'distlock-bench-list:lock:held:*' >/dev/null
echo "redis, one KEYS of the same keys: $(rcli --json slowlog get 10 | python3 -c '
import json, sys
print([e[2] for e in json.load(sys.stdin) if e[3][0].upper() == "KEYS"][0], "µs")')"
rcli config set slowlog-log-slower-than 10000 >/dev/null
rcli config set slowlog-max-len 128 >/dev/null

rcli --scan --pattern 'distlock-bench-list:*' | xargs -r -n 1000 redis-cli -u "$DISTLOCK_REDIS_URL" unlink >/dev/null
psql -q "$DISTLOCK_POSTGRES_URL" -c "DROP TABLE public.distlock_bench_list"
