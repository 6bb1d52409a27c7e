-- The values attached to leases: one row per key whose holder ever set a value, written
-- by value/set.sql and never deleted. A row belongs to the lease of its (token, fence):
-- value/inspect.sql reads it only with the key's live lease of that token and fence, so
-- the row left by an earlier lease is never read and is overwritten by the next
-- holder's first value. `value` is UTF-8 text of at most 1024 bytes, kept as bytes so the
-- database's character set cannot change it.
CREATE TABLE IF NOT EXISTS {values} (
    lock_key VARBINARY(1024) NOT NULL PRIMARY KEY,
    token VARBINARY(64) NOT NULL,
    fence BIGINT NOT NULL,
    value VARBINARY(1024) NOT NULL
) ENGINE = InnoDB
