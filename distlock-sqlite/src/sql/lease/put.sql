INSERT INTO {leases} (key, token, fence, boot, expires_ms, pid, pid_start, pid_ns)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (key) DO UPDATE SET
    token = excluded.token,
    fence = excluded.fence,
    boot = excluded.boot,
    expires_ms = excluded.expires_ms,
    pid = excluded.pid,
    pid_start = excluded.pid_start,
    pid_ns = excluded.pid_ns
