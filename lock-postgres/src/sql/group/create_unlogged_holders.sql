-- create_holders.sql for a store configured `unlogged`.
CREATE UNLOGGED TABLE IF NOT EXISTS {holders} (
    name text COLLATE "C" NOT NULL,
    slot integer NOT NULL,
    mode "char" NOT NULL,
    token uuid,
    owner text NOT NULL,
    fence bigint,
    ticket bigint,
    expires_at timestamptz NOT NULL,
    waiting boolean NOT NULL DEFAULT false,
    PRIMARY KEY (name, slot)
) WITH (fillfactor = 80)
