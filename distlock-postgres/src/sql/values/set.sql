-- $1 key, $2 token, $3 value → 1 row affected when attached. Written only while $2 holds
-- an unexpired lease on $1, stamped with that lease's token and fence; never over the
-- value of a later lease of the key (a larger fence): a statement that read a lease which
-- ended meanwhile does not overwrite the value of the key's next holder.
INSERT INTO {values} AS attached (key, token, fence, value, written_at)
SELECT key, token, fence, $3, clock_timestamp() FROM {table}
WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
ON CONFLICT (key) DO UPDATE
SET token = EXCLUDED.token, fence = EXCLUDED.fence, value = EXCLUDED.value, written_at = EXCLUDED.written_at
WHERE attached.fence <= EXCLUDED.fence
