INSERT INTO {queue} (key, token, seq, boot, placed_ms, expires_ms, pid, pid_start, pid_ns)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (key, token) DO UPDATE SET
    -- A place in force keeps when it was taken (every expression reads the old row).
    placed_ms = CASE WHEN boot = excluded.boot AND expires_ms > excluded.placed_ms THEN placed_ms
                     ELSE excluded.placed_ms END,
    boot = excluded.boot,
    expires_ms = excluded.expires_ms
