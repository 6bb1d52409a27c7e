-- Values attached to leases: at most one row per key, naming the lease it belongs to by
-- its token and fence. The lease statements never touch it; a row of an ended lease
-- stays until the key's next holder overwrites it or the purge deletes it, and is never
-- read, as readers join on the live lease's token and fence.
CREATE {unlogged} TABLE IF NOT EXISTS {values} (
    key text COLLATE "C" PRIMARY KEY,
    token text NOT NULL,
    fence bigint NOT NULL,
    value text NOT NULL,
    written_at timestamptz NOT NULL)
