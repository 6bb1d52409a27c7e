SELECT key, mode, permits FROM {permits} WHERE key IN (SELECT value FROM json_each(?1))
