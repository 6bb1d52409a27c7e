INSERT INTO {intents} (key, token, mode, ticket, boot, expires_ms, pid, pid_start, pid_ns)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (key, token) DO UPDATE SET
    mode = excluded.mode,
    ticket = excluded.ticket,
    boot = excluded.boot,
    expires_ms = excluded.expires_ms
