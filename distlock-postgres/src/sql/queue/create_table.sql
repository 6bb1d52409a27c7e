-- The queue of fair waiting: one row per waiting acquisition, ordered by `arrival`, live
-- while `expires_at` (the waiter's place, refreshed by each attempt) is in the future.
CREATE {unlogged} TABLE IF NOT EXISTS {queue} (
    key text COLLATE "C" NOT NULL,
    token text NOT NULL,
    arrival bigint GENERATED ALWAYS AS IDENTITY,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, token))
