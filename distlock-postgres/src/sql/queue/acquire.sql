-- The queued attempt: $1 key, $2 token, $3 TTL ms, $4 place TTL ms → one row (fence when
-- acquired, µs left of the live lease that keeps it out). Taken when the lease was handed
-- to $2 (whoever is first in line now), or is free and $2 is first in line (or nobody
-- waits); otherwise $2's place is taken, or refreshed once half of it has passed (so a
-- waiter woken by every hand-over rarely writes). A handed lease keeps its `waiting`
-- flag: waiters that flagged it while it was handed still wait for its release (a store
-- without notifications has no flag).
-- An attempt while another token holds the key draws no fence.
--
-- The head is found by walking the key's places in arrival order on the (key, arrival)
-- index, one `ORDER BY arrival LIMIT 1` step at a time, past lapsed places (see
-- release.sql for why).
WITH RECURSIVE walk AS (
    (SELECT arrival, token, expires_at > clock_timestamp() AS live
     FROM {queue} WHERE key = $1 ORDER BY arrival LIMIT 1)
    UNION ALL
    SELECT later.* FROM walk, LATERAL (
        SELECT arrival, token, expires_at > clock_timestamp() AS live
        FROM {queue} WHERE key = $1 AND arrival > walk.arrival ORDER BY arrival LIMIT 1) AS later
    WHERE NOT walk.live),
head AS (SELECT token FROM walk WHERE live),
-- Whether the live lease was handed to $2 (read once for the fence and the condition).
handed AS (SELECT EXISTS (SELECT 1 FROM {table} WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()) AS yes),
taken AS (
    INSERT INTO {table} AS held (key, token, fence, expires_at)
    SELECT $1, $2,
        -- A lease handed to $2 keeps the fence it was handed with (see the SET list).
        CASE WHEN (SELECT yes FROM handed) THEN 0 ELSE nextval('{sequence}') END,
        clock_timestamp() + $3 * interval '1 millisecond'
    -- A lease handed to $2 is taken whoever is first in line now: the release chose $2
    -- as the oldest live place it saw, and no one else can take the key before it lapses.
    WHERE (coalesce((SELECT token FROM head), $2) = $2 OR (SELECT yes FROM handed))
        -- A key another token holds: nothing to insert, and no fence drawn.
        AND NOT EXISTS (SELECT 1 FROM {table}
                        WHERE key = $1 AND token IS DISTINCT FROM $2 AND expires_at > clock_timestamp())
    ON CONFLICT (key) DO UPDATE
    SET token = EXCLUDED.token,
        fence = CASE WHEN held.token = EXCLUDED.token THEN held.fence
                     ELSE GREATEST(held.fence + 1, EXCLUDED.fence) END,
        expires_at = EXCLUDED.expires_at{notify},
        waiting = CASE WHEN held.token = EXCLUDED.token THEN held.waiting ELSE false END{end}
    WHERE held.expires_at <= clock_timestamp()
       OR (held.token = EXCLUDED.token AND held.expires_at > clock_timestamp())
    RETURNING held.fence),
-- Leaves with its own place the lapsed places the walk passed, each found by its primary
-- key.
left_queue AS (
    DELETE FROM {queue}
    WHERE key = $1 AND token = ANY(ARRAY(SELECT token FROM walk WHERE NOT live) || $2::text)
        AND EXISTS (SELECT 1 FROM taken)),
queued AS (
    INSERT INTO {queue} AS place (key, token, expires_at)
    SELECT $1, $2, clock_timestamp() + $4 * interval '1 millisecond'
    WHERE NOT EXISTS (SELECT 1 FROM taken)
    ON CONFLICT (key, token) DO UPDATE
    SET expires_at = EXCLUDED.expires_at,
        placed_at = CASE WHEN place.expires_at > clock_timestamp() THEN place.placed_at ELSE clock_timestamp() END
    WHERE place.expires_at < clock_timestamp() + $4 * interval '0.5 millisecond')
SELECT (SELECT fence FROM taken),
    (SELECT GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1)
     FROM {table} WHERE key = $1 AND token IS NOT NULL AND expires_at > clock_timestamp())
