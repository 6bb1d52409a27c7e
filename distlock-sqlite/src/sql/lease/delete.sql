DELETE FROM {leases} WHERE key = ?1 AND token = ?2 RETURNING boot, expires_ms
