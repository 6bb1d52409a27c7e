-- ?1 key, ?2 token, ?3 boot, ?4 now, ?5 new lease end → 1 row affected when the token's
-- running claim was renewed.
UPDATE {records} SET lease_ms = ?5
WHERE key = ?1 AND token = ?2 AND boot = ?3 AND lease_ms > ?4
