-- One purge batch: $1 horizon in ms, $2 batch size → rows affected. A value goes once it
-- was written at least the horizon ago and its lease (same token and fence) has not been
-- live within the horizon. The age of the write keeps a value that the key's next holder
-- writes while this statement runs: re-checked on that newer row, the condition fails
-- whatever this statement's snapshot of the lease table says.
DELETE FROM {values} AS attached WHERE key = ANY(ARRAY(
    SELECT stale.key FROM {values} AS stale
    WHERE stale.written_at < statement_timestamp() - $1 * interval '1 millisecond'
      AND NOT EXISTS (
          SELECT 1 FROM {table} AS held
          WHERE held.key = stale.key AND held.token = stale.token AND held.fence = stale.fence
            AND held.expires_at >= statement_timestamp() - $1 * interval '1 millisecond')
    LIMIT $2))
AND attached.written_at < statement_timestamp() - $1 * interval '1 millisecond'
AND NOT EXISTS (
    SELECT 1 FROM {table} AS held
    WHERE held.key = attached.key AND held.token = attached.token AND held.fence = attached.fence
      AND held.expires_at >= statement_timestamp() - $1 * interval '1 millisecond')
