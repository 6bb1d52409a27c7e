-- The idempotency records: a running claim (token, lease end) or a completed result
-- (response, retention end). `expires_at` is in microseconds since the Unix epoch on
-- the server's clock. Binary columns: keys compare byte for byte.
CREATE TABLE IF NOT EXISTS {table} (
    idem_key VARBINARY(1024) NOT NULL PRIMARY KEY,
    fingerprint VARBINARY(32) NOT NULL,
    token VARBINARY(64) NULL,
    response LONGBLOB NULL,
    expires_at BIGINT NOT NULL,
    INDEX {expires_index} (expires_at)
) ENGINE = InnoDB
