-- One purge batch: ? batch size → rows affected (records whose lease or retention
-- ended), oldest first along the index.
DELETE FROM {table} WHERE expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) ORDER BY expires_at LIMIT ?
