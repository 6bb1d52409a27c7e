-- The answer of a claim that did not start: ? fingerprint, ? fingerprint, ? key → one row
-- (outcome, data, µs left): 1 replay with the response; 2 in progress; 3 mismatch with
-- the stored fingerprint. No row when the key has no live record (any more).
SELECT CASE WHEN fingerprint <> ? THEN 3 WHEN token IS NULL THEN 1 ELSE 2 END,
    CASE WHEN fingerprint <> ? THEN fingerprint ELSE response END,
    GREATEST(expires_at - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 0)
FROM {table} WHERE idem_key = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
