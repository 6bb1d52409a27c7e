-- One purge batch: $1 batch size → rows affected (records whose lease or retention ended).
DELETE FROM {table} WHERE key = ANY(ARRAY(
    SELECT key FROM {table} WHERE expires_at <= clock_timestamp() LIMIT $1))
AND expires_at <= clock_timestamp()
