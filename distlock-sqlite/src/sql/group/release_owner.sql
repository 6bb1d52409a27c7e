DELETE FROM {holders} WHERE owner = ?1 RETURNING key, boot, expires_ms
