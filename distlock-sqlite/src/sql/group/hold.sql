INSERT INTO {holders} (key, token, mode, owner, fence, boot, expires_ms, pid, pid_start, pid_ns)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
ON CONFLICT (key, token) DO UPDATE SET
    mode = excluded.mode,
    owner = excluded.owner,
    fence = excluded.fence,
    boot = excluded.boot,
    expires_ms = excluded.expires_ms,
    pid = excluded.pid,
    pid_start = excluded.pid_start,
    pid_ns = excluded.pid_ns
