-- Reads no row: fails (naming it) when the table or a column is missing or not readable.
SELECT idem_key, fingerprint, token, response, expires_at FROM {table} LIMIT 0
