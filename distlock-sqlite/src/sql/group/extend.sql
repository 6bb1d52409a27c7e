UPDATE {holders} SET expires_ms = ?4
WHERE token = ?2 AND key IN (SELECT value FROM json_each(?1)) AND boot = ?3 AND expires_ms > ?5
