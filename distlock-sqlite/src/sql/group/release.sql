DELETE FROM {holders} WHERE token = ?2 AND key IN (SELECT value FROM json_each(?1))
RETURNING key, boot, expires_ms
