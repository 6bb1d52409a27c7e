-- One purge batch: $1 horizon in ms, $2 batch size → rows affected.
DELETE FROM {queue} WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM {queue}
    WHERE expires_at < statement_timestamp() - $1 * interval '1 millisecond' LIMIT $2))
