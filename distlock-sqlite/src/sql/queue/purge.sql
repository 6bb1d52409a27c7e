-- Places that are over: ?2 is the current boot, ?3 now; ?4 the tokens of places whose
-- processes are gone (a JSON array).
DELETE FROM {queue}
WHERE key = ?1 AND (boot <> ?2 OR expires_ms <= ?3 OR token IN (SELECT value FROM json_each(?4)))
