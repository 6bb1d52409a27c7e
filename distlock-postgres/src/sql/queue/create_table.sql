-- The queue of fair waiting: one row per waiting acquisition, ordered by `arrival`, live
-- while `expires_at` (the waiter's place, refreshed by each attempt) is in the future;
-- `placed_at` is when the place was taken.
CREATE {unlogged} TABLE IF NOT EXISTS {queue} (
    key text COLLATE "C" NOT NULL,
    token text NOT NULL,
    arrival bigint GENERATED ALWAYS AS IDENTITY,
    placed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, token))
