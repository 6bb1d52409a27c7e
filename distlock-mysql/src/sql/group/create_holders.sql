-- One row per hold of a group name: mode 0 exclusive, 1 shared; expiry in µs on the
-- server's clock.
CREATE TABLE IF NOT EXISTS {holders} (
    name VARBINARY(1024) NOT NULL,
    token VARBINARY(64) NOT NULL,
    mode TINYINT NOT NULL,
    owner VARBINARY(128) NOT NULL,
    fence BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (name, token),
    KEY {holders_owner} (owner)
) ENGINE = InnoDB
