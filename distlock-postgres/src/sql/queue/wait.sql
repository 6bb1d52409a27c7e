-- $1 key, $2 token: as the lease table's wait.sql, but a lease handed to $2 counts as free.
WITH flagged AS (
    UPDATE {table} SET waiting = true
    WHERE key = $1 AND token IS NOT NULL AND token <> $2 AND NOT waiting AND expires_at > clock_timestamp()
    RETURNING expires_at)
SELECT GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1)
FROM flagged
UNION ALL
SELECT GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1)
FROM {table}
WHERE key = $1 AND token IS NOT NULL AND token <> $2 AND waiting AND expires_at > clock_timestamp()
