-- ?1 key, ?2 token, ?3 boot, ?4 now → 1 row affected when the token's running claim was
-- deleted.
DELETE FROM {records} WHERE key = ?1 AND token = ?2 AND boot = ?3 AND lease_ms > ?4
