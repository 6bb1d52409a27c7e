-- ?1 key, ?2 token, ?3 boot, ?4 now, ?5 encoded response, ?6 end of retention (Unix ms)
-- → 1 row affected when the token's running claim became a completed record.
UPDATE {records} SET token = NULL, boot = NULL, lease_ms = NULL, response = ?5, retain_until_ms = ?6
WHERE key = ?1 AND token = ?2 AND boot = ?3 AND lease_ms > ?4
