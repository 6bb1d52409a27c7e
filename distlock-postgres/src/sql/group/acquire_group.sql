-- The grant function: one attempt at a group, in one transaction (see `group_sql.rs` for
-- the steps and why). Created by `ensure_schema` when missing, and replaced when the
-- function in the schema has another body than this file (by a store that creates its
-- schema; one that does not logs a warning).
--
-- Per member (`c` below): its permits (the permits row, else its default), what the
-- other rows of its name say (holders of its mode and of the other mode, the older places
-- of waiting groups of its mode and whether one is of the other mode, holds that ended by
-- `v_now`), whether it can be granted, and the slot its row goes to: the group's own row
-- of the name (a place), else the lowest free slot, else a new one. A first attempt (no
-- ticket yet) yields to every place recorded before it. Older places count as holders of
-- their mode ('I' exclusive, 'J' shared).
--
-- Slot 0 on the fast path is taken only when free. Taking a slot in the check: free, the
-- group's own, or an intent that ended (intents are only written under the names' locks,
-- so no one else can revive it). Recording a place: in a slot taken so; a place of its
-- own keeps its older ticket.
CREATE OR REPLACE FUNCTION {acquire_group}(
    p_names text[], p_modes text[], p_permits integer[], p_token uuid, p_owner text,
    p_ttl_ms bigint, p_intent_ttl_ms bigint, p_ticket bigint, p_again boolean, p_fair boolean,
    OUT granted_fence bigint, OUT blocked_ticket bigint)
LANGUAGE plpgsql VOLATILE
-- Custom plans would be made again at every call (for a one-element array, or a ticket
-- beyond the statistics, they look cheaper than the generic plan); a generic plan is
-- made once per session. Every lookup is an equality on the primary key's first column,
-- so the index is always the right path, also for a generic plan made while the table
-- was empty or small.
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $distlock$
DECLARE
    v_now timestamptz;
    v_held bigint;
    v_written bigint;
    v_granted boolean;
    v_stale boolean;
    v_first bigint;
    v_second bigint;
    v_intent_names text[];
    v_intent_slots integer[];
    v_intent_modes "char"[];
BEGIN
    -- A waiting group's retry, its places recorded and none of them past half its time,
    -- that a live hold or an older live place of the other mode blocks, is answered
    -- without the advisory locks: that row keeps it from being granted whatever else
    -- changes, so the locked check would block it too, and its places need no refresh yet.
    -- Queued readers' retries then do not queue for the name's lock ahead of the writer
    -- they wait for, nor does that writer's retry while readers hold the name. (A row
    -- freed since this snapshot only delays the group: the wait that follows checks again
    -- after it registered.)
    -- (Two IFs: the first is a plain expression, so an uncontended call runs no query.)
    IF p_ticket IS NOT NULL AND NOT p_again AND p_intent_ttl_ms IS NOT NULL THEN
        IF NOT EXISTS (
               SELECT 1 FROM unnest(p_names, p_modes::"char"[]) AS m(name, mode)
               WHERE (p_fair OR m.mode = 'W')
                 AND NOT EXISTS (
                     SELECT 1 FROM {holders} AS h
                     WHERE h.name = m.name AND h.token = p_token AND h.mode IN ('I', 'J')
                       AND h.expires_at > clock_timestamp() + p_intent_ttl_ms * interval '0.5 millisecond'))
           AND EXISTS (
               SELECT 1 FROM unnest(p_names, p_modes::"char"[]) AS m(name, mode)
               JOIN {holders} AS h ON h.name = m.name
               WHERE h.token <> p_token AND h.expires_at > clock_timestamp()
                 AND (h.mode = CASE m.mode WHEN 'W' THEN 'R'::"char" ELSE 'W'::"char" END
                      OR (h.mode = CASE m.mode WHEN 'W' THEN 'J'::"char" ELSE 'I'::"char" END
                          AND h.ticket < p_ticket)))
        THEN
            blocked_ticket := p_ticket;
            RETURN;
        END IF;
    END IF;

    -- One global order of lock keys. One or two names (the common cases) are plain
    -- expressions, evaluated without a query.
    IF cardinality(p_names) = 1 THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_names[1], 0));
    ELSIF cardinality(p_names) = 2 THEN
        v_first := hashtextextended(p_names[1], 0);
        v_second := hashtextextended(p_names[2], 0);
        PERFORM pg_advisory_xact_lock(LEAST(v_first, v_second));
        IF v_first <> v_second THEN
            PERFORM pg_advisory_xact_lock(GREATEST(v_first, v_second));
        END IF;
    ELSE
        -- unnest yields the sorted array in order, so the locks are taken in that order.
        PERFORM pg_advisory_xact_lock(k)
        FROM unnest(ARRAY(SELECT DISTINCT hashtextextended(n, 0) FROM unnest(p_names) AS n ORDER BY 1)) AS k;
    END IF;

    IF p_again THEN
        -- Run again after a lost connection: the first run may have taken every member.
        SELECT count(f), max(f) INTO v_held, granted_fence
        FROM (SELECT (SELECT h.fence FROM {holders} AS h
                      WHERE h.name = m.name AND h.token = p_token AND h.mode = m.mode
                        AND h.expires_at > clock_timestamp()) AS f
              FROM unnest(p_names, p_modes::"char"[]) AS m(name, mode)) AS held;
        IF v_held = cardinality(p_names) AND v_held > 0 THEN
            RETURN;
        END IF;
    END IF;

    -- Drawn now that the locks are ours, so larger than the fence of every earlier grant
    -- of these names; a blocked attempt leaves a gap, which fencing allows.
    granted_fence := nextval('{sequence}');

    -- A first attempt on names that no one holds, waits for or left stale (all their
    -- rows free; intents of its own cannot exist yet): take slot 0 of each (free, or
    -- inserted when it never existed or was purged). One or two names (the common cases)
    -- are read element by element.
    IF p_ticket IS NULL AND NOT p_again THEN
        IF cardinality(p_names) = 1 THEN
            INSERT INTO {holders} AS h (name, slot, mode, token, owner, fence, ticket, expires_at, waiting)
            SELECT p_names[1], 0, p_modes[1]::"char", p_token, p_owner, granted_fence, NULL,
                   clock_timestamp() + p_ttl_ms * interval '1 millisecond', false
            WHERE NOT EXISTS (SELECT 1 FROM {holders} AS x WHERE x.name = p_names[1] AND x.token IS NOT NULL)
            ON CONFLICT (name, slot) DO UPDATE
            SET mode = EXCLUDED.mode, token = EXCLUDED.token, owner = EXCLUDED.owner,
                fence = EXCLUDED.fence, ticket = NULL, expires_at = EXCLUDED.expires_at, waiting = false
            WHERE h.token IS NULL;
        ELSIF cardinality(p_names) = 2 THEN
            INSERT INTO {holders} AS h (name, slot, mode, token, owner, fence, ticket, expires_at, waiting)
            SELECT m.name, 0, m.mode::"char", p_token, p_owner, granted_fence, NULL,
                   clock_timestamp() + p_ttl_ms * interval '1 millisecond', false
            FROM (VALUES (p_names[1], p_modes[1]), (p_names[2], p_modes[2])) AS m(name, mode)
            WHERE NOT EXISTS (SELECT 1 FROM {holders} AS x
                              WHERE x.name IN (p_names[1], p_names[2]) AND x.token IS NOT NULL)
            ON CONFLICT (name, slot) DO UPDATE
            SET mode = EXCLUDED.mode, token = EXCLUDED.token, owner = EXCLUDED.owner,
                fence = EXCLUDED.fence, ticket = NULL, expires_at = EXCLUDED.expires_at, waiting = false
            WHERE h.token IS NULL;
        ELSE
            INSERT INTO {holders} AS h (name, slot, mode, token, owner, fence, ticket, expires_at, waiting)
            SELECT m.name, 0, m.mode, p_token, p_owner, granted_fence, NULL,
                   clock_timestamp() + p_ttl_ms * interval '1 millisecond', false
            FROM unnest(p_names, p_modes::"char"[]) AS m(name, mode)
            WHERE NOT EXISTS (SELECT 1 FROM {holders} AS x
                              WHERE x.name = ANY(p_names) AND x.token IS NOT NULL)
            ON CONFLICT (name, slot) DO UPDATE
            SET mode = EXCLUDED.mode, token = EXCLUDED.token, owner = EXCLUDED.owner,
                fence = EXCLUDED.fence, ticket = NULL, expires_at = EXCLUDED.expires_at, waiting = false
            WHERE h.token IS NULL;
        END IF;
        GET DIAGNOSTICS v_written = ROW_COUNT;
        IF v_written = cardinality(p_names) THEN
            RETURN;
        ELSIF v_written > 0 THEN
            RAISE EXCEPTION 'distlock: a group grant took % of % slots', v_written, cardinality(p_names);
        END IF;
    END IF;

    v_now := clock_timestamp();
    -- A first attempt's ticket is the number it drew from the sequence: unique, and larger
    -- than the ticket of every place recorded before it under these names' locks, so a
    -- group that arrives after another (a reader a moment after a writer, both blocked)
    -- stays behind it at every later attempt, not only within the same millisecond.
    blocked_ticket := coalesce(p_ticket, granted_fence);

    -- A first attempt blocked for certain: a live hold, or an older live place, of the
    -- other mode on one of its names (the check below would not pass it either). Only
    -- its places are written, without the full check: less time
    -- under the names' locks, for which the other acquirers of the names queue (readers
    -- that return after their release while a writer waits, then that writer's granting
    -- retry). A retry that gets here was not blocked so in step 0 a moment ago.
    IF p_ticket IS NULL AND NOT p_again AND EXISTS (
           SELECT 1 FROM unnest(p_names, p_modes::"char"[]) AS m(name, mode)
           JOIN {holders} AS h ON h.name = m.name
           WHERE h.token <> p_token AND h.expires_at > v_now
             AND (h.mode = CASE m.mode WHEN 'W' THEN 'R'::"char" ELSE 'W'::"char" END
                  OR (h.mode = CASE m.mode WHEN 'W' THEN 'J'::"char" ELSE 'I'::"char" END
                      AND h.ticket <= blocked_ticket)))
    THEN
        granted_fence := NULL;
        IF p_intent_ttl_ms IS NOT NULL THEN
            INSERT INTO {holders} AS h (name, slot, mode, token, owner, fence, ticket, placed_at, expires_at, waiting)
            SELECT m.name, coalesce(s.own, s.free, s.top + 1, 0),
                   CASE m.mode WHEN 'W' THEN 'I'::"char" ELSE 'J'::"char" END, p_token, p_owner, NULL,
                   blocked_ticket, clock_timestamp(), clock_timestamp() + p_intent_ttl_ms * interval '1 millisecond',
                   false
            FROM unnest(p_names, p_modes::"char"[]) AS m(name, mode),
                 LATERAL (SELECT min(f.slot) FILTER (WHERE f.token = p_token) AS own,
                                 min(f.slot) FILTER (WHERE f.token IS NULL
                                                       OR (f.mode IN ('I', 'J') AND f.expires_at <= v_now)) AS free,
                                 max(f.slot) AS top
                          FROM {holders} AS f WHERE f.name = m.name) AS s
            WHERE p_fair OR m.mode = 'W'
            ON CONFLICT (name, slot) DO UPDATE
            SET mode = EXCLUDED.mode, token = EXCLUDED.token, owner = EXCLUDED.owner, fence = NULL,
                ticket = CASE WHEN h.token = EXCLUDED.token AND h.mode IN ('I', 'J')
                              THEN LEAST(h.ticket, EXCLUDED.ticket) ELSE EXCLUDED.ticket END,
                placed_at = CASE WHEN h.token = EXCLUDED.token AND h.mode IN ('I', 'J')
                                 THEN coalesce(h.placed_at, EXCLUDED.placed_at) ELSE EXCLUDED.placed_at END,
                expires_at = EXCLUDED.expires_at,
                waiting = h.waiting AND h.token IS NOT DISTINCT FROM EXCLUDED.token
            WHERE h.token IS NULL OR h.token = EXCLUDED.token OR (h.mode IN ('I', 'J') AND h.expires_at <= v_now);
        END IF;
        RETURN;
    END IF;

    -- Check and take, in one statement on a snapshot taken now that the locks are ours.
    -- A hold that ended by `v_now` (stale) does not count, but an `extend` of it may be
    -- in flight: then nothing is taken, and the second pass comes after an UPDATE that
    -- frees those rows, which waits for such an extend.
    FOR v_pass IN 1..2 LOOP
        WITH c AS MATERIALIZED (
            SELECT d.name, d.mode, coalesce(a.own, a.free, a.top + 1, 0) AS slot,
                   a.other = 0 AND NOT a.yields AND (p.permits IS NULL OR a.same + a.queued < p.permits) AS ok,
                   a.stale
            FROM unnest(p_names, p_modes::"char"[], p_permits) AS d(name, mode, default_permits),
                 LATERAL (SELECT coalesce((SELECT p.permits FROM {permits} AS p
                                           WHERE p.name = d.name AND p.mode = d.mode),
                                          d.default_permits) AS permits) AS p,
                 LATERAL (SELECT
                     count(*) FILTER (WHERE h.mode = d.mode AND h.token <> p_token AND h.expires_at > v_now) AS same,
                     count(*) FILTER (WHERE h.mode <> d.mode AND h.mode NOT IN ('I', 'J') AND h.token <> p_token
                                        AND h.expires_at > v_now) AS other,
                     count(*) FILTER (WHERE h.mode IN ('I', 'J') AND (h.mode = 'I') = (d.mode = 'W')
                                        AND h.token <> p_token AND h.expires_at > v_now
                                        AND h.ticket < blocked_ticket) AS queued,
                     coalesce(bool_or(h.mode IN ('I', 'J') AND (h.mode = 'I') <> (d.mode = 'W')
                                      AND h.token <> p_token AND h.expires_at > v_now
                                      AND h.ticket < blocked_ticket), false) AS yields,
                     coalesce(bool_or(h.mode NOT IN ('I', 'J') AND h.token <> p_token AND h.expires_at <= v_now),
                              false) AS stale,
                     min(h.slot) FILTER (WHERE h.token = p_token) AS own,
                     min(h.slot) FILTER (WHERE h.token IS NULL OR (h.mode IN ('I', 'J') AND h.expires_at <= v_now))
                         AS free,
                     max(h.slot) AS top
                     FROM {holders} AS h WHERE h.name = d.name) AS a),
        taken AS (
            INSERT INTO {holders} AS h (name, slot, mode, token, owner, fence, ticket, expires_at, waiting)
            SELECT c.name, c.slot, c.mode, p_token, p_owner, granted_fence, NULL,
                   clock_timestamp() + p_ttl_ms * interval '1 millisecond', false
            FROM c
            WHERE (SELECT bool_and(v.ok) AND NOT bool_or(v.stale) FROM c AS v)
            ON CONFLICT (name, slot) DO UPDATE
            SET mode = EXCLUDED.mode, token = EXCLUDED.token, owner = EXCLUDED.owner, fence = EXCLUDED.fence,
                ticket = NULL, expires_at = EXCLUDED.expires_at,
                -- the flag of the group's own intent carries over: its waiters wait for this release
                waiting = h.waiting AND h.token IS NOT DISTINCT FROM EXCLUDED.token
            WHERE h.token IS NULL OR h.token = EXCLUDED.token OR (h.mode IN ('I', 'J') AND h.expires_at <= v_now)
            RETURNING 1)
        SELECT (SELECT count(*) FROM taken), coalesce(bool_and(c.ok), false), coalesce(bool_or(c.stale), false),
               array_agg(c.name) FILTER (WHERE p_fair OR c.mode = 'W'),
               array_agg(c.slot) FILTER (WHERE p_fair OR c.mode = 'W'),
               array_agg(CASE c.mode WHEN 'W' THEN 'I'::"char" ELSE 'J'::"char" END) FILTER (WHERE p_fair OR c.mode = 'W')
        INTO v_written, v_granted, v_stale, v_intent_names, v_intent_slots, v_intent_modes
        FROM c;
        EXIT WHEN NOT v_stale OR v_pass = 2;
        UPDATE {holders} SET token = NULL
        WHERE name = ANY(p_names) AND token IS NOT NULL AND mode NOT IN ('I', 'J') AND expires_at <= v_now;
    END LOOP;

    IF v_written > 0 THEN
        IF v_written <> cardinality(p_names) THEN
            -- Unreachable under the locks; rolls the partial grant back rather than return it.
            RAISE EXCEPTION 'distlock: a group grant took % of % slots', v_written, cardinality(p_names);
        END IF;
        blocked_ticket := NULL;
        RETURN;
    END IF;

    granted_fence := NULL;
    IF p_intent_ttl_ms IS NOT NULL AND v_intent_names IS NOT NULL THEN
        INSERT INTO {holders} AS h (name, slot, mode, token, owner, fence, ticket, placed_at, expires_at, waiting)
        SELECT i.name, i.slot, i.mode, p_token, p_owner, NULL, blocked_ticket,
               clock_timestamp(), clock_timestamp() + p_intent_ttl_ms * interval '1 millisecond', false
        FROM unnest(v_intent_names, v_intent_slots, v_intent_modes) AS i(name, slot, mode)
        ON CONFLICT (name, slot) DO UPDATE
        SET mode = EXCLUDED.mode, token = EXCLUDED.token, owner = EXCLUDED.owner, fence = NULL,
            ticket = CASE WHEN h.token = EXCLUDED.token AND h.mode IN ('I', 'J')
                          THEN LEAST(h.ticket, EXCLUDED.ticket) ELSE EXCLUDED.ticket END,
            placed_at = CASE WHEN h.token = EXCLUDED.token AND h.mode IN ('I', 'J')
                             THEN coalesce(h.placed_at, EXCLUDED.placed_at) ELSE EXCLUDED.placed_at END,
            expires_at = EXCLUDED.expires_at,
            waiting = h.waiting AND h.token IS NOT DISTINCT FROM EXCLUDED.token
        WHERE h.token IS NULL OR h.token = EXCLUDED.token OR (h.mode IN ('I', 'J') AND h.expires_at <= v_now);
    END IF;
END
$distlock$
