-- A claim: $1 key, $2 fingerprint, $3 token, $4 lease in ms → one row (outcome, data,
-- ms_left): 0 started; 1 replay with the response; 2 in progress with the lease's time
-- left; 3 mismatch with the stored fingerprint. A live record of another claim answers
-- from the snapshot (no insert attempted: a replay writes and locks nothing). Otherwise
-- insert, or take over a record whose lease or retention ended, or a claim of the same
-- token (a retried claim); a row written concurrently by another claim makes the insert
-- do nothing and the statement return no row (then `read.sql` reads it).
WITH live AS (
    SELECT fingerprint, token, response, expires_at FROM {table}
    WHERE key = $1 AND expires_at > clock_timestamp()),
claimed AS (
    INSERT INTO {table} AS r (key, fingerprint, token, response, expires_at)
    SELECT $1, $2, $3, NULL, clock_timestamp() + $4 * interval '1 millisecond'
    WHERE NOT EXISTS (SELECT 1 FROM live WHERE live.token IS DISTINCT FROM $3)
    ON CONFLICT (key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, token = EXCLUDED.token,
        response = NULL, expires_at = EXCLUDED.expires_at
    WHERE r.expires_at <= clock_timestamp() OR r.token = EXCLUDED.token
    RETURNING 1)
SELECT 0, NULL::bytea, NULL::bigint FROM claimed
UNION ALL
SELECT CASE WHEN r.fingerprint <> $2 THEN 3 WHEN r.response IS NOT NULL THEN 1 ELSE 2 END,
    CASE WHEN r.fingerprint <> $2 THEN r.fingerprint ELSE r.response END,
    GREATEST(0, ceil(extract(epoch FROM r.expires_at - clock_timestamp()) * 1000))::bigint
FROM live r WHERE NOT EXISTS (SELECT 1 FROM claimed)
