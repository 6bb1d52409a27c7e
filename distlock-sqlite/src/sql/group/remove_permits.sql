DELETE FROM {permits} WHERE key = ?1 AND mode = ?2
