SELECT token, seq, placed_ms, boot, expires_ms, pid, pid_start, pid_ns FROM {queue} WHERE key = ?1 ORDER BY seq
