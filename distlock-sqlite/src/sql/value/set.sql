-- ?1 key, ?2 token, ?3 boot, ?4 value, ?5 now (ms of CLOCK_BOOTTIME) → 1 row changed when
-- written, 0 when the token holds no lease on the key unexpired at ?5 (the check of
-- lease/extend.sql; nothing is written). The row takes the lease's token and fence,
-- replacing whatever an earlier lease of the key left. (The WHERE clause also tells
-- SQLite's parser that ON CONFLICT belongs to the INSERT.)
INSERT INTO {values} (key, token, fence, value)
SELECT key, token, fence, ?4 FROM {leases}
WHERE key = ?1 AND token = ?2 AND boot = ?3 AND expires_ms > ?5
ON CONFLICT (key) DO UPDATE SET token = excluded.token, fence = excluded.fence, value = excluded.value
