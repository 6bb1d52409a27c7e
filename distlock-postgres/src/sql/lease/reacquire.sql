-- acquire.sql run again after a lost connection: a live lease of the same token $2
-- counts as acquired and keeps its fence and its `waiting` flag (when the store has one).
INSERT INTO {table} AS held (key, token, fence, expires_at)
VALUES ($1, $2, nextval('{sequence}'), clock_timestamp() + $3 * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE
SET token = EXCLUDED.token,
    fence = CASE WHEN held.token = EXCLUDED.token AND held.expires_at > clock_timestamp() THEN held.fence
                 ELSE GREATEST(held.fence + 1, nextval('{sequence}')) END,
    expires_at = clock_timestamp() + $3 * interval '1 millisecond'{notify},
    waiting = CASE WHEN held.token = EXCLUDED.token AND held.expires_at > clock_timestamp() THEN held.waiting
                   ELSE false END{end}
WHERE held.expires_at <= clock_timestamp() OR held.token = EXCLUDED.token
RETURNING held.fence, clock_timestamp() - statement_timestamp() < 60000 * interval '1 millisecond'
