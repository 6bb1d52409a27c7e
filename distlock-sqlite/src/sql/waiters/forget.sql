-- Sockets that no longer exist (their processes are gone): ?1 is a JSON array.
DELETE FROM {waiters} WHERE socket IN (SELECT value FROM json_each(?1))
