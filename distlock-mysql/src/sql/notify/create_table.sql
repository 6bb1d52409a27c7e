-- Who waits for a key's release: one row per (key, listener connection id of a waiting
-- store), live while `expires_at` is ahead of the server's clock. A release that sees
-- a live row interrupts those listeners' `SLEEP` with `KILL QUERY`.
CREATE TABLE IF NOT EXISTS {waiters} (
    lock_key VARBINARY(1024) NOT NULL,
    listener BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (lock_key, listener)
) ENGINE = InnoDB
