-- Reads no row: fails (naming it) when the table or a column is missing or not readable.
SELECT lock_key, token, fence, expires_at, handed FROM {table} LIMIT 0
