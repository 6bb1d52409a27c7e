UPDATE {leases} SET expires_ms = ?4
WHERE key = ?1 AND token = ?2 AND boot = ?3 AND expires_ms > ?5
