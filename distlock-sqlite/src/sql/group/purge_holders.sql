-- Rows on the names in ?1 (a JSON array) that are over: of another boot than ?2,
-- expired by ?3, or of the tokens in ?4 whose processes are gone.
DELETE FROM {holders}
WHERE key IN (SELECT value FROM json_each(?1))
  AND (boot <> ?2 OR expires_ms <= ?3 OR token IN (SELECT value FROM json_each(?4)))
