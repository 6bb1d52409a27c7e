-- Rows written under another boot than ?1 are expired: removed when a store connects.
DELETE FROM {queue} WHERE boot <> ?1
