INSERT INTO {queue} (key, token, seq, boot, expires_ms, pid, pid_start, pid_ns)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (key, token) DO UPDATE SET boot = excluded.boot, expires_ms = excluded.expires_ms
