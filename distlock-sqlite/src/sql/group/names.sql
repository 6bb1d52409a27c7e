-- One page of the group listing: ?1 lowest name (inclusive), ?2 cursor (exclusive), ?3
-- page size → the next names with a hold or place row, in key order (two index ranges,
-- merged; the caller reads their holds and places).
SELECT key FROM {holders} WHERE key >= ?1 AND key > ?2
UNION
SELECT key FROM {intents} WHERE key >= ?1 AND key > ?2
ORDER BY key
LIMIT ?3
