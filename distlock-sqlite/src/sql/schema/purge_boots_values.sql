-- Values whose key has no lease left (run after purge_boots_leases.sql, when a new boot
-- removed every lease of the boots before): no lease of theirs can come back.
DELETE FROM {values} WHERE NOT EXISTS (SELECT 1 FROM {leases} AS lease WHERE lease.key = {values}.key)
