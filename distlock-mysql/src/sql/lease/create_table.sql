-- The lease table: one row per key ever taken. `expires_at` is in microseconds since the
-- Unix epoch on the server's clock; a released row keeps its fence (token NULL, expired),
-- so fences keep increasing per key. `handed` marks a lease handed to a queued waiter
-- by a release (its place is then still in the queue). Binary columns: keys compare byte
-- for byte.
CREATE TABLE IF NOT EXISTS {table} (
    lock_key VARBINARY(1024) NOT NULL PRIMARY KEY,
    token VARBINARY(64) NULL,
    fence BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    handed TINYINT NOT NULL DEFAULT 0
) ENGINE = InnoDB
