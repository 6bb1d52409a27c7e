-- One row per place (intent) of a waiting group on a name, ordered by the group's ticket;
-- `placed_at` (µs on the server's clock) is when it was first taken.
CREATE TABLE IF NOT EXISTS {places} (
    name VARBINARY(1024) NOT NULL,
    token VARBINARY(64) NOT NULL,
    mode TINYINT NOT NULL,
    ticket BIGINT NOT NULL,
    placed_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (name, token)
) ENGINE = InnoDB
