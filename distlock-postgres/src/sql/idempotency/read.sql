-- The answer of a claim that did not start, read with a fresh snapshot: $1 key,
-- $2 fingerprint → a row as `claim.sql` answers, or no row when the key has no live record.
SELECT CASE WHEN r.fingerprint <> $2 THEN 3 WHEN r.response IS NOT NULL THEN 1 ELSE 2 END,
    CASE WHEN r.fingerprint <> $2 THEN r.fingerprint ELSE r.response END,
    GREATEST(0, ceil(extract(epoch FROM r.expires_at - clock_timestamp()) * 1000))::bigint
FROM {table} r WHERE r.key = $1 AND r.expires_at > clock_timestamp()
