-- One purge batch: $1 horizon in ms, $2 batch size → rows affected.
DELETE FROM {holders} WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM {holders}
    WHERE expires_at < statement_timestamp() - $1 * interval '1 millisecond'
    LIMIT $2))
AND expires_at < statement_timestamp() - $1 * interval '1 millisecond'
