DELETE FROM {queue} WHERE key = ?1 AND token = ?2
