-- Who waits for a key's release (or a group name's change): one row per (key, listener
-- connection id of a waiting store, fair waiter's token — '' for a waiter woken by any
-- release), live while `expires_at` is ahead of the server's clock. A release that sees
-- a live row interrupts those listeners' `SLEEP` with `KILL QUERY`; the listener deletes
-- rows that ended.
CREATE TABLE IF NOT EXISTS {waiters} (
    lock_key VARBINARY(1024) NOT NULL,
    listener BIGINT NOT NULL,
    token VARBINARY(64) NOT NULL DEFAULT '',
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (lock_key, listener, token)
) ENGINE = InnoDB
