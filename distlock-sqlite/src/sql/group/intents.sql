SELECT key, token, mode, ticket, placed_ms, boot, expires_ms, pid, pid_start, pid_ns FROM {intents}
WHERE key IN (SELECT value FROM json_each(?1))
