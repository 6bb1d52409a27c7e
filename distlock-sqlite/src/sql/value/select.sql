-- ?1 key → the key's lease row as lease/select.sql reads it, with `value`: the value its
-- own lease (same token and fence) set, or NULL. No row when the key has no lease row.
-- One read of both tables; whether the lease is in force is decided by the caller, as
-- for lease/select.sql.
SELECT lease.token AS token, lease.fence AS fence, lease.boot AS boot, lease.expires_ms AS expires_ms,
       lease.pid AS pid, lease.pid_start AS pid_start, lease.pid_ns AS pid_ns, attached.value AS value
FROM {leases} AS lease
LEFT JOIN {values} AS attached
    ON attached.key = lease.key AND attached.token = lease.token AND attached.fence = lease.fence
WHERE lease.key = ?1
