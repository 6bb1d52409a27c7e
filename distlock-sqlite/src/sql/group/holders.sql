SELECT key, token, mode, owner, fence, boot, expires_ms, pid, pid_start, pid_ns FROM {holders}
WHERE key IN (SELECT value FROM json_each(?1))
