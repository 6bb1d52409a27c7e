-- $1 key → one row (µs left) when the lease is live and flagged as waited for, no row
-- when free (or when a concurrent flag makes it uncertain). Both parts see the
-- statement's snapshot: the UPDATE flags a live, unflagged lease (re-checking its WHERE
-- on the latest version if it waited for a row lock); the SELECT finds a live lease that
-- was already flagged. At most one row. See `sql.rs` for why sleeping on a row is safe.
WITH flagged AS (
    UPDATE {table} SET waiting = true
    WHERE key = $1 AND token IS NOT NULL AND NOT waiting AND expires_at > clock_timestamp()
    RETURNING expires_at)
SELECT GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1)
FROM flagged
UNION ALL
SELECT GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1)
FROM {table}
WHERE key = $1 AND token IS NOT NULL AND waiting AND expires_at > clock_timestamp()
