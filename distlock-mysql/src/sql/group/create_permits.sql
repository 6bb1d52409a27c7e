-- The recorded permits of (name, mode).
CREATE TABLE IF NOT EXISTS {permits} (
    name VARBINARY(1024) NOT NULL,
    mode TINYINT NOT NULL,
    permits BIGINT NOT NULL,
    PRIMARY KEY (name, mode)
) ENGINE = InnoDB
