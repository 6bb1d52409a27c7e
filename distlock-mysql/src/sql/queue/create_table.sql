-- The queue of fair waiting: one row per waiting acquisition, served in `arrival` order,
-- live while `expires_at` (the waiter's place, refreshed by each attempt) is ahead of
-- the server's clock; `placed_at` (µs) is when the place was taken.
CREATE TABLE IF NOT EXISTS {queue} (
    lock_key VARBINARY(1024) NOT NULL,
    token VARBINARY(64) NOT NULL,
    arrival BIGINT NOT NULL AUTO_INCREMENT,
    placed_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (lock_key, token),
    UNIQUE KEY (arrival),
    KEY {queue_order} (lock_key, arrival)
) ENGINE = InnoDB
