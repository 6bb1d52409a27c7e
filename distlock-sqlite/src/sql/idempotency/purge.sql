-- One purge batch: ?1 boot, ?2 now, ?3 now on the Unix clock, ?4 batch size → rows
-- affected: records that are neither a running claim of this boot with time left nor a
-- result within its retention.
DELETE FROM {records} WHERE key IN (
    SELECT key FROM {records}
    WHERE NOT (token IS NOT NULL AND boot = ?1 AND lease_ms > ?2)
      AND NOT (response IS NOT NULL AND retain_until_ms > ?3)
    LIMIT ?4)
