-- create_table.sql for a store configured `unlogged`.
CREATE UNLOGGED TABLE IF NOT EXISTS {queue} (
    key text COLLATE "C" NOT NULL,
    token text NOT NULL,
    arrival bigint GENERATED ALWAYS AS IDENTITY,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, token))
