-- COLLATE "C": keys compare byte for byte (and faster). No index on expires_at, so lease
-- updates stay HOT; fillfactor leaves room for them.
CREATE {unlogged} TABLE IF NOT EXISTS {table} (
    key text COLLATE "C" PRIMARY KEY,
    token text,
    fence bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    waiting boolean NOT NULL DEFAULT false
) WITH (fillfactor = 80)
