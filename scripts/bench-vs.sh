#!/usr/bin/env bash
# Runs the store benchmarks of this tree beside those of another revision, in one run:
#
#   scripts/bench-vs.sh REV [BENCH…]     # BENCH: memory, redis, postgres, etcd, … (default: memory redis postgres)
#
# REV is checked out in a worktree under target/bench-vs/ and its benchmarks are built
# there (release profile, in this tree's target directory: the dependencies are shared). Then, under the servers of
# scripts/test.sh, each benchmark runs as REV's build, then this tree's, then REV's and
# this tree's again, so that a drift of the machine shows as a difference between the two
# runs of one side. Every benchmark reports each figure as a ratio to its raw baseline,
# measured in the same process, so the ratios of the two revisions compare even where
# their absolute times drift. The logs stay in target/bench-vs/logs/; the ratio lines of
# each benchmark are printed side by side at the end.
#
# DISTLOCK_BENCH_ROUNDS, DISTLOCK_FAIR_SECONDS and DISTLOCK_BENCH_SCALE are passed on
# (defaults here: 5 rounds, 3 s per fair-waiting variant).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -ge 1 ] && exit 0 || exit 64
fi

if [ -z "${DISTLOCK_BENCH_VS_UNDER_TEST_SH:-}" ]; then
  export DISTLOCK_BENCH_VS_UNDER_TEST_SH=1
  exec scripts/test.sh "$0" "$@"
fi

rev="$1"
shift
benches=("$@")
[ ${#benches[@]} -eq 0 ] && benches=(memory redis postgres)
export DISTLOCK_BENCH_ROUNDS="${DISTLOCK_BENCH_ROUNDS:-5}" DISTLOCK_FAIR_SECONDS="${DISTLOCK_FAIR_SECONDS:-3}"

base="$(pwd)/target/bench-vs"
other="$base/$(git rev-parse --short "$rev")"
logs="$base/logs"
mkdir -p "$base" "$logs"
if [ ! -d "$other" ]; then
  git worktree add -q --detach "$other" "$rev"
fi

# "<name> <executable>" of every benchmark a tree builds.
executables() {
  (cd "$1" && cargo bench --workspace --all-features --benches --no-run --message-format=json-render-diagnostics) \
    | python3 -c '
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and "bench" in msg["target"]["kind"] and msg.get("executable"):
        print(msg["target"]["name"], msg["executable"])
'
}
echo "==> building $rev's benchmarks in $other"
CARGO_TARGET_DIR="$(pwd)/target" executables "$other" >"$logs/before.txt"
echo "==> building this tree's benchmarks"
executables . >"$logs/after.txt"

pick() { awk -v name="$2" '$1 == name { print $2; exit }' "$1"; }
for bench in "${benches[@]}"; do
  before="$(pick "$logs/before.txt" "$bench")"
  after="$(pick "$logs/after.txt" "$bench")"
  if [ -z "$before" ] || [ -z "$after" ]; then
    echo "scripts/bench-vs.sh: no benchmark \`$bench\` in both trees" >&2
    exit 1
  fi
  for run in 1 2; do
    for side in before after; do
      executable="$before"
      [ "$side" = after ] && executable="$after"
      echo "==> $bench, $side, run $run"
      "$executable" --bench >"$logs/$bench.$side.$run.log" 2>&1
    done
  done
done

# The comparisons' titles and ratio lines, each run's beside the others.
for bench in "${benches[@]}"; do
  echo
  echo "### $bench"
  python3 - "$logs" "$bench" <<'PY'
import re, sys
logs, bench = sys.argv[1:3]
runs = [(side, run) for run in (1, 2) for side in ("before", "after")]
tables = {}
for side, run in runs:
    title = None
    for line in open(f"{logs}/{bench}.{side}.{run}.log", errors="replace"):
        line = line.rstrip()
        if line and not line.startswith(" "):
            title = line
        match = re.match(r"\s+(\S[^0-9]*?)\s+[0-9.]+ \S+\s+([0-9.]+)× ", line)
        if title and match:
            tables.setdefault((title, match.group(1)), {})[(side, run)] = float(match.group(2))
print("| figure | variant | " + " | ".join(f"{side} {run}" for side, run in runs) + " |")
print("|---|---|" + "---:|" * len(runs))
for (title, variant), values in tables.items():
    cells = " | ".join(f"{values[key]:.3f}×" if key in values else "–" for key in runs)
    print(f"| {title} | {variant} | {cells} |")
PY
done
