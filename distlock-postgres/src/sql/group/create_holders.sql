-- Holds and places in one table, one row per slot of a name: `mode` 'R' shared, 'W'
-- exclusive, 'I' and 'J' the place (intent) of a waiting group's exclusive and shared
-- member (no fence; its ticket orders it, `placed_at` is when it was first taken);
-- `token` NULL: a free slot, which the next
-- grant of the name takes. Grants, releases and lease updates change no indexed column
-- (the owner only when another owner takes a slot), so they are HOT updates, as on the
-- lease table. No CHECK constraints: PostgreSQL would read their expressions again at
-- every statement, and only the store's statements write the table.
CREATE {unlogged} TABLE IF NOT EXISTS {holders} (
    name text COLLATE "C" NOT NULL,
    slot integer NOT NULL,
    mode "char" NOT NULL,
    token uuid,
    owner text NOT NULL,
    fence bigint,
    ticket bigint,
    placed_at timestamptz,
    expires_at timestamptz NOT NULL,
    waiting boolean NOT NULL DEFAULT false,
    PRIMARY KEY (name, slot)
) WITH (fillfactor = 80)
