-- ? key: makes sure the key has a lease row (free) for the queued attempt to lock. Its
-- own autocommit statement, so two attempts never both hold a shared lock on a missing
-- row and then wait for each other.
INSERT IGNORE INTO {table} (lock_key, token, fence, expires_at, handed) VALUES (?, NULL, 0, 0, 0)
