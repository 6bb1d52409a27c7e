-- create_table.sql for a store configured `unlogged`.
CREATE UNLOGGED TABLE IF NOT EXISTS {table} (
    key text COLLATE "C" PRIMARY KEY,
    token text,
    fence bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    waiting boolean NOT NULL DEFAULT false
) WITH (fillfactor = 80)
