#!/usr/bin/env bash
# Removes the per-key fencing hashes (`<prefix>:fence:<key>`, type hash) that earlier
# versions of distlock-redis never deleted, under the test suites' own prefixes only:
# `distlock-conformance-fencing` (conformance, fencing mode) and `dltest-*` (store tests).
# SCAN + TYPE + UNLINK: never KEYS, never FLUSHALL, never a key of another type (the
# current layout's counter and volatile fence keys are strings and are left alone).
#
#   lock-redis/scripts/purge-legacy-fence-hashes.sh [redis://127.0.0.1:6379]
set -euo pipefail
url="${1:-${DISTLOCK_REDIS_URL:-redis://127.0.0.1:6379}}"
removed=0
for pattern in 'distlock-conformance-fencing:fence:*' 'dltest-*:fence:*'; do
  while IFS= read -r key; do
    [ -n "$key" ] || continue
    if [ "$(redis-cli -u "$url" --raw TYPE "$key")" = hash ]; then
      redis-cli -u "$url" UNLINK "$key" >/dev/null
      removed=$((removed + 1))
    fi
  done < <(redis-cli -u "$url" --scan --pattern "$pattern")
done
echo "removed $removed legacy fence hashes from $url"
