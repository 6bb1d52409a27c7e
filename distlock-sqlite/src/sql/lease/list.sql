SELECT key, token, fence, boot, expires_ms, pid, pid_start, pid_ns FROM {leases}
WHERE key >= ?1 AND key > ?2
ORDER BY key
LIMIT ?3
