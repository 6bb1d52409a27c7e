-- Run by a waiter after it registered, with its request: $1 names, $2 modes, $3 default
-- permits, $4 token, $5 ticket or NULL → one row (blocking rows that may not be flagged,
-- blocking rows, µs until the first blocking row ends, whether a shared hold or place
-- blocks, releases needed before the request could be granted).
--
-- The arrays are read through scalar subqueries (see extend.sql): the statement is
-- planned once per connection, not at every wait. The request's members with their
-- permits; the live rows of other groups on their names; of those, the ones that keep the
-- request from being granted now (the grant function's check, read without its locks: a
-- stale answer only costs a spurious or a later wake-up, never a missed one, because the
-- waiter registered first), and how many of them must be released before it could be
-- (every row of the other mode; of its own mode, as many as keep the holders at or above
-- the permits). The UPDATE flags the blocking rows not flagged yet; a blocking row of the
-- snapshot that is neither flagged there nor by the UPDATE was freed meanwhile (or
-- flagged by a waiter this snapshot cannot see): the caller returns at once, as it does
-- when nothing blocks. A row another transaction has locked (a release, a grant, another
-- waiter flagging it) is skipped, not waited for, and counts as such a row: a waiter
-- never waits for a row lock, so it can never be part of a deadlock.
WITH m AS MATERIALIZED (
    SELECT d.name, d.mode,
        coalesce((SELECT p.permits FROM {permits} AS p WHERE p.name = d.name AND p.mode = d.mode),
                 d.default_permits) AS permits
    FROM unnest((SELECT $1::text[]), (SELECT $2::"char"[]), (SELECT $3::int4[]))
        AS d(name, mode, default_permits)),
now AS MATERIALIZED (SELECT clock_timestamp() AS at),
live AS MATERIALIZED (
    SELECT h.name, h.slot, h.token, h.expires_at, h.waiting,
        CASE h.mode WHEN 'I' THEN 'W'::"char" WHEN 'J' THEN 'R'::"char" ELSE h.mode END AS mode,
        h.mode NOT IN ('I', 'J')
            OR $5 IS NULL OR h.ticket < $5 AS counts
    FROM {holders} AS h, now
    WHERE h.name = ANY((SELECT $1::text[])::text[]) AND h.token <> $4::uuid AND h.expires_at > now.at),
tally AS MATERIALIZED (
    SELECT m.name, m.mode, m.permits,
        count(*) FILTER (WHERE l.counts AND l.mode <> m.mode) AS other,
        count(*) FILTER (WHERE l.counts AND l.mode = m.mode) AS same
    FROM m LEFT JOIN live AS l ON l.name = m.name
    GROUP BY m.name, m.mode, m.permits),
blocking AS MATERIALIZED (
    SELECT l.name, l.slot, l.token, l.expires_at, l.waiting, l.mode
    FROM tally AS t JOIN live AS l ON l.name = t.name
    WHERE l.counts
      AND (l.mode <> t.mode OR (t.permits IS NOT NULL AND t.same >= t.permits))),
lockable AS (
    SELECT h.ctid AS row_id FROM {holders} AS h JOIN blocking AS b
        ON h.name = b.name AND h.slot = b.slot AND h.token = b.token
    WHERE NOT h.waiting
    FOR UPDATE OF h SKIP LOCKED),
flagged AS (
    UPDATE {holders} AS h SET waiting = true FROM lockable AS k
    WHERE h.ctid = k.row_id AND NOT h.waiting AND h.expires_at > clock_timestamp()
    RETURNING h.name, h.slot)
SELECT count(*) FILTER (WHERE NOT b.waiting AND f.name IS NULL), count(*),
    GREATEST((extract(epoch FROM min(b.expires_at) - clock_timestamp()) * 1000000)::bigint, 1),
    coalesce(bool_or(b.mode = 'R'), false),
    (SELECT coalesce(sum(t.other + CASE WHEN t.permits IS NOT NULL AND t.same >= t.permits
                                        THEN t.same - t.permits + 1 ELSE 0 END), 0)::bigint
     FROM tally AS t)
FROM blocking AS b LEFT JOIN flagged AS f ON f.name = b.name AND f.slot = b.slot
