SELECT token, fence, boot, expires_ms, pid, pid_start, pid_ns FROM {leases} WHERE key = ?1
