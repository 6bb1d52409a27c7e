#!/usr/bin/env bash
# Regenerates every benchmark figure: BENCHMARKS.md and the plots in docs/bench/.
#
#   scripts/bench.sh           # the reference run
#   scripts/bench.sh --quick   # fewer rounds and shorter runs, for a look
#
# Servers are started exactly as for the tests: the script runs itself under
# scripts/test.sh, which starts a private Redis, PostgreSQL, MariaDB and etcd (or uses the
# DISTLOCK_*_URL servers it is given) and stops them at the end. Then it
#   1. builds every store's benchmark (release profile) and the `distlock` command;
#   2. runs each benchmark, which measures every figure side by side with its baseline in
#      one run and writes its results as JSON lines (DISTLOCK_BENCH_OUT, one file per
#      suite: memory, redis, postgres, …; a benchmark added as distlock-<store>/benches/<store>.rs
#      is picked up under the suite <store>); the stores that elect leaders (Redis,
#      PostgreSQL, etcd, MySQL, SQLite) measure leader election there too, etcd beside its
#      own election: hand-over, observer lag and failover after `kill -9` (TTL 2 s, about
#      2.5 s a failover: 10 failovers per side, 5 with --quick);
#   3. runs `distlock bench --plot` on every store for the plots' measurements;
#   4. rewrites BENCHMARKS.md and docs/bench/*.svg from the results (`bench-report`).
# The results stay in DISTLOCK_BENCH_RESULTS (default target/bench-results).
# DISTLOCK_BENCH_PEERS=1 also runs distlock-bench-peers/ (rslock, distributed-lock; a workspace
# of its own, built on first use).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=full
for arg in "$@"; do
  case "$arg" in
    --quick) mode=quick ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scripts/bench.sh: unknown argument \`$arg\` (usage: scripts/bench.sh [--quick])" >&2; exit 64 ;;
  esac
done

if [ -z "${DISTLOCK_BENCH_UNDER_TEST_SH:-}" ]; then
  export DISTLOCK_BENCH_UNDER_TEST_SH=1 DISTLOCK_BENCH_COMMAND="scripts/bench.sh${*:+ $*}"
  exec scripts/test.sh "$0" "$@"
fi

results="${DISTLOCK_BENCH_RESULTS:-target/bench-results}"
rm -rf "$results"
mkdir -p "$results"
results="$(cd "$results" && pwd)"
step() { printf '\n==> %s   [%ss]\n' "$*" "$SECONDS"; }

if [ "$mode" = quick ]; then
  export DISTLOCK_BENCH_ROUNDS="${DISTLOCK_BENCH_ROUNDS:-3}" DISTLOCK_FAIR_SECONDS="${DISTLOCK_FAIR_SECONDS:-2}" \
    DISTLOCK_BENCH_SCALE="${DISTLOCK_BENCH_SCALE:-0.2}"
  point=300ms
else
  point=2s
fi

json_string() { local s="${1//\\/\\\\}"; s="${s//\"/\\\"}"; printf '"%s"' "$s"; }
cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n1)"
servers="Redis $(redis-cli -u "$DISTLOCK_REDIS_URL" info server | tr -d '\r' | sed -n 's/^redis_version://p'), PostgreSQL $(psql "$DISTLOCK_POSTGRES_URL" -qtAX -c 'SHOW server_version'), $(mariadb --version | sed -n 's/.*\(MariaDB\|Distrib\) \([0-9.]*\).*/MariaDB \2/p' | head -n1), etcd $(etcd --version | sed -n 's/^etcd Version: //p')"
cat >"$results/run.json" <<JSON
{
  "date": "$(date -u +%Y-%m-%d)",
  "command": $(json_string "${DISTLOCK_BENCH_COMMAND:-scripts/bench.sh}"),
  "cpu": $(json_string "$cpu"),
  "cores": $(nproc),
  "servers": $(json_string "$servers")
}
JSON

step "building the benchmarks and distlock (release)"
# One build for every benchmark; its JSON names each benchmark's executable.
cargo bench --workspace --all-features --benches --no-run --message-format=json-render-diagnostics >"$results/build.json"
cargo build --release -q -p distlock-cli --features etcd
cargo build --release -q -p distlock-bench --bin bench-report
target="${CARGO_TARGET_DIR:-target}"

# "<suite> <executable>" per benchmark: distlock-<store>/benches/<store>.rs is the suite
# <store>, other benches of a store `<store>-<bench>`.
python3 - "$results/build.json" >"$results/benches.txt" <<'PY'
import json, os, sys
special = {("redis", "group_floor"): "redis-groups", ("redis", "scale"): "redis-scale", ("optimistic", "versioned"): "versioned"}
# The crates that are not stores or store recipes have no suite.
tools = {"bench", "cli", "macros", "conformance", "testing", "api", "sql"}
for line in open(sys.argv[1]):
    msg = json.loads(line)
    if msg.get("reason") != "compiler-artifact" or "bench" not in msg["target"]["kind"] or not msg.get("executable"):
        continue
    folder = os.path.basename(os.path.dirname(msg["manifest_path"]))
    if not folder.startswith("distlock-") or folder[len("distlock-"):] in tools:
        continue
    store, bench = folder[len("distlock-"):], msg["target"]["name"]
    print(special.get((store, bench), store if bench == store else f"{store}-{bench}"), msg["executable"])
PY

export DISTLOCK_BENCH_OUT="$results"
# A benchmark that fails leaves its section out; the others still run and are written.
failed=()
while read -r suite executable; do
  step "benchmark $suite ($mode)"
  DISTLOCK_BENCH_SUITE="$suite" "$executable" --bench 2>&1 | tee "$results/$suite.log" || failed+=("$suite")
done <"$results/benches.txt"

if [ "${DISTLOCK_BENCH_PEERS:-0}" = 1 ]; then
  step "peers (distlock-bench-peers/)"
  DISTLOCK_BENCH_SUITE=peers cargo bench -q --manifest-path distlock-bench-peers/Cargo.toml 2>&1 | tee "$results/peers.log" \
    || failed+=(peers)
fi

# The plots' measurements through `distlock bench`, one store at a time; the raw
# baseline where the command has one.
sqlite_dir="$(mktemp -d)"
trap 'rm -rf "$sqlite_dir"' EXIT
plot_stores=(
  "memory memory:// --baseline"
  "redis $DISTLOCK_REDIS_URL?prefix=plot&fair=true&notifications=true --baseline"
  "postgres $DISTLOCK_POSTGRES_URL --baseline"
  "mysql $DISTLOCK_MYSQL_URL"
  "etcd $DISTLOCK_ETCD_URL"
  "sqlite sqlite://$sqlite_dir/locks.db"
)
for entry in "${plot_stores[@]}"; do
  read -r suite url baseline <<<"$entry"
  step "distlock bench --plot: $suite"
  DISTLOCK_BENCH_SUITE="$suite" "$target/release/distlock" --store "$url" bench $baseline \
    --duration "$point" --workers 8 --retry 50ms --plot "$results/plots/$suite" || failed+=("distlock bench: $suite")
done

# `distlock run` on the embedded store beside flock(1), each command started as a whole
# process in turn, the ratio taken per pair of runs.
if command -v flock >/dev/null; then
  step "distlock run vs flock"
  runs=50
  [ "$mode" = quick ] && runs=20
  DISTLOCK_BENCH_RUNS="$runs" python3 - "$target/release/distlock" "$sqlite_dir" "$results/sqlite.jsonl" <<'PY' \
    || failed+=("distlock run vs flock")
import json, os, statistics, subprocess, sys, time
distlock, tmp, out = sys.argv[1:4]
runs = int(os.environ["DISTLOCK_BENCH_RUNS"])
commands = [
    ("flock FILE true", ["flock", os.path.join(tmp, "flock.lock"), "true"]),
    ("distlock run KEY -- true", [distlock, "--store", f"sqlite://{tmp}/run.db", "run", "bench-run", "--", "true"]),
]
def once(argv):
    start = time.monotonic()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return (time.monotonic() - start) * 1e3
for _ in range(3):
    for _, argv in commands:
        once(argv)
samples = [[], []]
for _ in range(runs):
    for index, (_, argv) in enumerate(commands):
        samples[index].append(once(argv))
base = statistics.median(samples[0])
rows = []
for (name, _), own in zip(commands, samples):
    pairs = [a / b for a, b in zip(own, samples[0])]
    rows.append({"name": name, "value": statistics.median(own), "ratio": statistics.median(own) / base,
                 "min": min(pairs), "max": max(pairs)})
    print(f"{name:28} median {statistics.median(own):7.2f} ms/run")
record = {"kind": "ratios", "suite": "sqlite", "unit": "ms/run", "rounds": runs, "rows": rows,
          "title": f"`distlock run` on the embedded store beside flock(1), wall time per run, {runs} runs each"}
with open(out, "a") as file:
    file.write(json.dumps(record) + "\n")
PY
fi

step "BENCHMARKS.md and docs/bench/"
rm -f docs/bench/*.svg
"$target/release/bench-report" "$results" BENCHMARKS.md docs/bench
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'scripts/bench.sh: failed, left out of BENCHMARKS.md: %s\n' "${failed[*]}" >&2
  exit 1
fi
step "done"
