-- One row per group name: the row a grant locks (names in key order, so two grants never
-- wait for each other crosswise) and the name's last group fence.
CREATE TABLE IF NOT EXISTS {names} (
    name VARBINARY(1024) NOT NULL PRIMARY KEY,
    fence BIGINT NOT NULL
) ENGINE = InnoDB
