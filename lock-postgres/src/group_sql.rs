//! The SQL of lock groups: two tables beside the lease table, one PL/pgSQL function that
//! grants a group in one call, and the plain statements around it.
//!
//! Names, modes, tokens and durations travel as bind parameters; only validated,
//! double-quoted identifiers and the notification channel are spliced into the text.
//!
//! # Why a function, and why this order inside it
//!
//! A grant must read the holders and permits of every member and write the new holds
//! with nothing changing in between. One autocommit statement cannot do that under
//! `READ COMMITTED`: its snapshot is taken before any lock it waits for, so a grant
//! committed by a concurrent acquirer while it waited stays invisible and both are
//! granted. So the function, in one transaction:
//!
//! 1. takes `pg_advisory_xact_lock(hashtextextended(name, 0))` for every name, in the
//!    order of the lock keys (one global order: no deadlocks, also when two names hash
//!    alike; a collision only serialises two names more than needed). Acquirers of a
//!    name now run one after the other, and the locks end with the transaction, so
//!    transaction poolers are fine;
//! 2. run again after a lost connection (`p_again`), recognises a group its token already
//!    holds whole (the first run committed before its answer was lost) and returns that
//!    fence;
//! 3. deletes the expired rows of its names. The `DELETE` locks them, so an `extend`
//!    that read a hold as live just before it expired and has not committed is waited
//!    for and re-checked (it either committed first — the hold is live and counts — or
//!    finds the row gone and reports it not held): an expired hold can never be counted
//!    free and revived at the same time;
//! 4. checks every member in a new statement — the function is `VOLATILE`, so each
//!    statement takes a fresh snapshot, which includes every grant committed before the
//!    advisory locks were ours — against the live holders, the live older intents (for
//!    shared members) and the permits row of (name, mode), else the member's default;
//!    `coalesce(bool_and(…), false)` so that nothing is granted for no member;
//! 5. blocked: records or refreshes the intents of its exclusive members (when asked)
//!    and returns the ticket; granted: deletes its own rows of those names (intents), draws
//!    one fence from the store's sequence (after every earlier grant of these names
//!    committed, so it is larger than their fences) and inserts one hold per member.
//!
//! # Release notifications
//!
//! Holds carry the `waiting` flag of the lease table's protocol (see `sql.rs`): a
//! waiter registers for `group:<name>` of each of its names, then flags every live row
//! of those names ([`GroupStatements::wait`]); a release, a withdrawal or `release_owner`
//! notifies `group:<name>` for the live flagged rows it deletes. A grant carries the flag
//! of its own intents over to its new holds, so readers that waited on a writer's intent
//! are woken when that writer releases. Permit changes always notify.

use crate::config::{Identifier, Layout};
use crate::notify::channel_name;

/// The payload prefix of group notifications: `group:<store key>` never equals a single
/// lock's payload (a store key, `lock:<key>`).
pub(crate) const GROUP_PAYLOAD_PREFIX: &str = "group:";

/// The columns the group statements use, per table.
pub(crate) const HOLDER_COLUMNS: [&str; 8] =
    ["name", "mode", "token", "owner", "fence", "ticket", "expires_at", "waiting"];
pub(crate) const PERMIT_COLUMNS: [&str; 3] = ["name", "mode", "permits"];

/// The exact SQL of a store's lock groups
/// ([`Statements::groups`](crate::Statements::groups)).
#[derive(Debug)]
pub struct GroupStatements {
    holders_table: String,
    permits_table: String,
    function: String,
    pub(crate) holders_name: Identifier,
    pub(crate) permits_name: Identifier,
    pub(crate) function_name: Identifier,
    pub(crate) acquire: String,
    pub(crate) extend: String,
    pub(crate) release: String,
    pub(crate) withdraw: String,
    pub(crate) release_owner: String,
    pub(crate) set_permits: String,
    pub(crate) remove_permits: String,
    pub(crate) permits: String,
    pub(crate) holders: String,
    pub(crate) wait: String,
    pub(crate) purge: String,
    pub(crate) state: String,
    pub(crate) create_holders: String,
    pub(crate) create_owner_index: String,
    pub(crate) create_permits: String,
    pub(crate) create_function: String,
}

/// What the catalog says about the group objects: `(holders relpersistence, holders
/// columns missing, holders privileges missing, permits exists, permits columns missing,
/// permits privileges missing, function exists, function executable)`.
pub(crate) type GroupSchemaState =
    (Option<String>, Vec<String>, Vec<String>, bool, Vec<String>, Vec<String>, bool, Option<bool>);

impl GroupStatements {
    /// The holders table, qualified and quoted, e.g. `"public"."distlock_locks_holders"`.
    pub fn holders_table(&self) -> &str {
        &self.holders_table
    }

    /// The permits table, qualified and quoted, e.g. `"public"."distlock_locks_permits"`.
    pub fn permits_table(&self) -> &str {
        &self.permits_table
    }

    /// The grant function, qualified and quoted, e.g.
    /// `"public"."distlock_locks_acquire_group_v1"`.
    pub fn function(&self) -> &str {
        &self.function
    }

    /// One attempt: `SELECT granted_fence, blocked_ticket FROM <function>($1 names text[],
    /// $2 modes text[] ('R' shared, 'W' exclusive), $3 default permits int4[] (NULL:
    /// unlimited), $4 token uuid, $5 owner text, $6 TTL ms, $7 intent TTL ms or NULL,
    /// $8 ticket or NULL, $9 whether the call is run again after a lost connection)`: one
    /// row, the fence when granted, else the ticket. Run again, it recognises a group its
    /// token already holds whole and returns that fence.
    pub fn acquire(&self) -> &str {
        &self.acquire
    }

    /// `$1` names, `$2` token, `$3` TTL ms → rows affected: the live holds extended.
    pub fn extend(&self) -> &str {
        &self.extend
    }

    /// `$1` names, `$2` token → one row `(live holds deleted)`; deletes the token's holds
    /// and intents of those names and notifies flagged names.
    pub fn release(&self) -> &str {
        &self.release
    }

    /// `$1` names, `$2` token: deletes the token's intents of those names.
    pub fn withdraw(&self) -> &str {
        &self.withdraw
    }

    /// `$1` owner → one row `(live holds deleted)`; deletes every row of the owner.
    pub fn release_owner(&self) -> &str {
        &self.release_owner
    }

    /// `$1` name, `$2` mode (`'R'`/`'W'`), `$3` permits: upsert into the permits table.
    pub fn set_permits(&self) -> &str {
        &self.set_permits
    }

    /// `$1` name, `$2` mode: deletes the permits entry.
    pub fn remove_permits(&self) -> &str {
        &self.remove_permits
    }

    /// `$1` name, `$2` mode → the recorded permits, or no row.
    pub fn permits(&self) -> &str {
        &self.permits
    }

    /// `$1` name → `(token, mode, owner, fence, µs left)` per live hold.
    pub fn holders(&self) -> &str {
        &self.holders
    }

    /// Run by a waiter after it registered: `$1` names → one row `(rows of those names
    /// that may not be flagged, live rows, µs until the first lease ends)`, flagging the
    /// live rows not flagged yet.
    pub fn wait(&self) -> &str {
        &self.wait
    }

    /// The DDL that [`ensure_schema`](crate::PostgresLockStore::ensure_schema) runs for
    /// groups, in order: the holders table, its owner index, the permits table and the
    /// function.
    pub fn ddl(&self) -> [&str; 4] {
        [&self.create_holders, &self.create_owner_index, &self.create_permits, &self.create_function]
    }

    pub(crate) fn new(layout: &Layout) -> Self {
        let schema = layout.schema.quoted();
        let holders_name = layout.table.derived("holders");
        let permits_name = layout.table.derived("permits");
        let function_name = layout.table.derived("acquire_group_v1");
        let owner_index = layout.table.derived("holders_owner");
        let holders = format!("{schema}.{}", holders_name.quoted());
        let permits = format!("{schema}.{}", permits_name.quoted());
        let function = format!("{schema}.{}", function_name.quoted());
        // Inside string literals: identifiers and channel names contain no quotes.
        let sequence = format!("{schema}.{}", layout.sequence.quoted());
        let channel = channel_name(layout);
        let unlogged = if layout.unlogged { "UNLOGGED " } else { "" };
        let micros_left =
            |column: &str| format!("GREATEST((extract(epoch FROM {column} - clock_timestamp()) * 1000000)::bigint, 1)");
        // The count of live holds among `gone` (the deleted rows), notifying each live
        // flagged name once (PostgreSQL folds equal notifications of one transaction).
        let count_and_notify = |gone: &str| {
            if layout.notify {
                format!(
                    "SELECT count(*) FILTER (WHERE live AND mode <> 'I'), \
                         (SELECT count(pg_notify('{channel}', '{GROUP_PAYLOAD_PREFIX}' || name)::text) \
                          FROM (SELECT DISTINCT name FROM {gone} WHERE live AND waiting) AS flagged) \
                     FROM {gone}"
                )
            } else {
                format!("SELECT count(*) FILTER (WHERE live AND mode <> 'I'), 0::bigint FROM {gone}")
            }
        };
        let notify_name = |source: &str| {
            if layout.notify {
                format!("SELECT count(pg_notify('{channel}', '{GROUP_PAYLOAD_PREFIX}' || name)::text) FROM {source}")
            } else {
                format!("SELECT count(*) FROM {source}")
            }
        };
        Self {
            acquire: format!(
                "SELECT granted_fence, blocked_ticket FROM {function}($1, $2, $3, $4::uuid, $5, $6, $7, $8, $9)"
            ),
            extend: format!(
                "UPDATE {holders} SET expires_at = clock_timestamp() + $3 * interval '1 millisecond' \
                 WHERE name = ANY($1) AND token = $2::uuid AND mode <> 'I' AND expires_at > clock_timestamp()"
            ),
            release: format!(
                "WITH gone AS ( \
                     DELETE FROM {holders} WHERE name = ANY($1) AND token = $2::uuid \
                     RETURNING name, mode, waiting, expires_at > clock_timestamp() AS live) {}",
                count_and_notify("gone")
            ),
            withdraw: format!(
                "WITH gone AS ( \
                     DELETE FROM {holders} WHERE name = ANY($1) AND token = $2::uuid AND mode = 'I' \
                     RETURNING name, mode, waiting, expires_at > clock_timestamp() AS live) {}",
                count_and_notify("gone")
            ),
            release_owner: format!(
                "WITH gone AS ( \
                     DELETE FROM {holders} WHERE owner = $1 \
                     RETURNING name, mode, waiting, expires_at > clock_timestamp() AS live) {}",
                count_and_notify("gone")
            ),
            set_permits: format!(
                "WITH changed AS ( \
                     INSERT INTO {permits} (name, mode, permits) VALUES ($1, $2::\"char\", $3) \
                     ON CONFLICT (name, mode) DO UPDATE SET permits = EXCLUDED.permits \
                     RETURNING name) {}",
                notify_name("changed")
            ),
            remove_permits: format!(
                "WITH changed AS ( \
                     DELETE FROM {permits} WHERE name = $1 AND mode = $2::\"char\" RETURNING name) {}",
                notify_name("changed")
            ),
            permits: format!("SELECT permits FROM {permits} WHERE name = $1 AND mode = $2::\"char\""),
            holders: format!(
                "SELECT token::text, mode::text, owner, fence, {} FROM {holders} \
                 WHERE name = $1 AND mode <> 'I' AND expires_at > clock_timestamp() \
                 ORDER BY fence, token",
                micros_left("expires_at")
            ),
            // The UPDATE flags live rows not flagged yet; the outer query reads the
            // statement's snapshot. A live row of the snapshot that is neither flagged
            // there nor by the UPDATE was deleted meanwhile, or flagged by a concurrent
            // waiter whose flag this snapshot cannot see: the caller returns at once.
            wait: format!(
                "WITH flagged AS ( \
                     UPDATE {holders} SET waiting = true \
                     WHERE name = ANY($1) AND NOT waiting AND expires_at > clock_timestamp() \
                     RETURNING name, token, mode) \
                 SELECT count(*) FILTER (WHERE NOT held.waiting AND flagged.name IS NULL), count(*), {} \
                 FROM {holders} AS held \
                 LEFT JOIN flagged ON flagged.name = held.name AND flagged.token = held.token \
                     AND flagged.mode = held.mode \
                 WHERE held.name = ANY($1) AND held.expires_at > clock_timestamp()",
                micros_left("min(held.expires_at)")
            ),
            purge: format!(
                "DELETE FROM {holders} WHERE ctid = ANY(ARRAY( \
                     SELECT ctid FROM {holders} \
                     WHERE expires_at < statement_timestamp() - $1 * interval '1 millisecond' \
                     LIMIT $2)) \
                 AND expires_at < statement_timestamp() - $1 * interval '1 millisecond'"
            ),
            state: "WITH s AS (SELECT oid FROM pg_namespace WHERE nspname = $1), \
                     h AS (SELECT c.oid, c.relpersistence FROM pg_class c JOIN s ON s.oid = c.relnamespace \
                           WHERE c.relname = $2 AND c.relkind IN ('r', 'p')), \
                     p AS (SELECT c.oid FROM pg_class c JOIN s ON s.oid = c.relnamespace \
                           WHERE c.relname = $3 AND c.relkind IN ('r', 'p')), \
                     f AS (SELECT f.oid FROM pg_proc f JOIN s ON s.oid = f.pronamespace WHERE f.proname = $4) \
                 SELECT (SELECT relpersistence::text FROM h), \
                     ARRAY(SELECT wanted FROM unnest($5::text[]) AS wanted, h \
                           WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a \
                                             WHERE a.attrelid = h.oid AND a.attname = wanted AND NOT a.attisdropped)), \
                     ARRAY(SELECT wanted FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS wanted, h \
                           WHERE NOT has_table_privilege(h.oid, wanted)), \
                     EXISTS (SELECT 1 FROM p), \
                     ARRAY(SELECT wanted FROM unnest($6::text[]) AS wanted, p \
                           WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a \
                                             WHERE a.attrelid = p.oid AND a.attname = wanted AND NOT a.attisdropped)), \
                     ARRAY(SELECT wanted FROM unnest(ARRAY['SELECT']) AS wanted, p \
                           WHERE NOT has_table_privilege(p.oid, wanted)), \
                     EXISTS (SELECT 1 FROM f), \
                     (SELECT bool_and(has_function_privilege(f.oid, 'EXECUTE')) FROM f)"
                .to_owned(),
            // Holds and intents in one table: `mode` 'R' shared, 'W' exclusive, 'I' the
            // intent of a waiting exclusive request (no fence; its ticket orders it).
            // Lease updates touch no indexed column, so they stay HOT.
            create_holders: format!(
                "CREATE {unlogged}TABLE IF NOT EXISTS {holders} ( \
                     name text COLLATE \"C\" NOT NULL, \
                     mode \"char\" NOT NULL CHECK (mode IN ('R', 'W', 'I')), \
                     token uuid NOT NULL, \
                     owner text NOT NULL, \
                     fence bigint CHECK ((mode = 'I') = (fence IS NULL)), \
                     ticket bigint CHECK ((mode = 'I') = (ticket IS NOT NULL)), \
                     expires_at timestamptz NOT NULL, \
                     waiting boolean NOT NULL DEFAULT false, \
                     PRIMARY KEY (name, token, mode) \
                 ) WITH (fillfactor = 80)"
            ),
            create_owner_index: format!("CREATE INDEX IF NOT EXISTS {} ON {holders} (owner)", owner_index.quoted()),
            // Configuration, not state: always logged, so permits survive a crash.
            create_permits: format!(
                "CREATE TABLE IF NOT EXISTS {permits} ( \
                     name text COLLATE \"C\" NOT NULL, \
                     mode \"char\" NOT NULL CHECK (mode IN ('R', 'W')), \
                     permits integer NOT NULL CHECK (permits >= 1), \
                     PRIMARY KEY (name, mode))"
            ),
            create_function: acquire_function(&function, &holders, &permits, &sequence),
            holders_table: holders,
            permits_table: permits,
            function,
            holders_name,
            permits_name,
            function_name,
        }
    }

    /// What is missing or unusable, in words, for `check_schema`'s error (empty: all
    /// is there).
    pub(crate) fn problems(&self, schema: &Identifier, state: &GroupSchemaState) -> Vec<String> {
        let (
            holders,
            holder_columns,
            holder_privileges,
            permits,
            permit_columns,
            permit_privileges,
            function,
            executable,
        ) = state;
        let qualified = |name: &Identifier| format!("{}.{}", schema.quoted(), name.quoted());
        let mut problems = Vec::new();
        let mut table = |exists: bool, name: &Identifier, columns: &[String], privileges: &[String]| {
            if !exists {
                problems.push(format!("table {} does not exist", qualified(name)));
                return;
            }
            if !columns.is_empty() {
                problems.push(format!("table {} has no column {}", qualified(name), columns.join(", ")));
            }
            if !privileges.is_empty() {
                problems.push(format!("no {} privilege on table {}", privileges.join(", "), qualified(name)));
            }
        };
        table(holders.is_some(), &self.holders_name, holder_columns, holder_privileges);
        table(*permits, &self.permits_name, permit_columns, permit_privileges);
        if !function {
            problems.push(format!("function {} does not exist", qualified(&self.function_name)));
        } else if *executable == Some(false) {
            problems.push(format!("no EXECUTE privilege on function {}", qualified(&self.function_name)));
        }
        problems
    }

    /// Whether everything exists (privileges aside), so that `ensure_schema` has nothing
    /// to create.
    pub(crate) fn complete(state: &GroupSchemaState) -> bool {
        state.0.is_some() && state.3 && state.6
    }

    /// The DDL to run when something is missing: the `CREATE … IF NOT EXISTS`
    /// statements, and the function only when it does not exist (an existing one is
    /// never replaced).
    pub(crate) fn creation(&self, state: &GroupSchemaState) -> Vec<&str> {
        let mut ddl = vec![self.create_holders.as_str(), &self.create_owner_index, &self.create_permits];
        if !state.6 {
            ddl.push(&self.create_function);
        }
        ddl
    }
}

/// The grant function (see the module documentation for the steps and why).
fn acquire_function(function: &str, holders: &str, permits: &str, sequence: &str) -> String {
    format!(
        r#"CREATE OR REPLACE FUNCTION {function}(
    p_names text[], p_modes text[], p_permits integer[], p_token uuid, p_owner text,
    p_ttl_ms bigint, p_intent_ttl_ms bigint, p_ticket bigint, p_again boolean,
    OUT granted_fence bigint, OUT blocked_ticket bigint)
LANGUAGE plpgsql VOLATILE
-- Custom plans would be made again at every call (for a one-element array they look
-- cheaper than the generic plan); a generic plan is made once per session. Every lookup
-- is an equality on the primary key's first column; plain index scans (not bitmap
-- scans) mark the entries of deleted holds dead, so the churn of holds inserted and
-- deleted on a hot name does not slow later lookups down until the next vacuum.
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
AS $distlock$
DECLARE
    v_now timestamptz;
    v_held bigint;
    v_granted boolean;
    v_flagged text[] := '{{}}';
    v_name text;
    v_was_flagged boolean;
BEGIN
    -- unnest yields the sorted array in order, so the locks are taken in that order.
    PERFORM pg_advisory_xact_lock(k)
    FROM unnest(ARRAY(SELECT DISTINCT hashtextextended(n, 0) FROM unnest(p_names) AS n ORDER BY 1)) AS k;

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
        granted_fence := NULL;
    END IF;

    v_now := clock_timestamp();
    blocked_ticket := coalesce(p_ticket, floor(extract(epoch FROM v_now) * 1000)::bigint);
    FOREACH v_name IN ARRAY p_names LOOP
        DELETE FROM {holders} WHERE name = v_name AND expires_at <= v_now;
    END LOOP;

    SELECT coalesce(bool_and(
               NOT EXISTS (SELECT 1 FROM {holders} AS h
                           WHERE h.name = m.name AND h.mode <> m.mode AND h.mode <> 'I'
                             AND h.token <> p_token AND h.expires_at > v_now)
               AND (m.permits IS NULL
                    OR (SELECT count(*) FROM {holders} AS h
                        WHERE h.name = m.name AND h.mode = m.mode
                          AND h.token <> p_token AND h.expires_at > v_now) < m.permits)
               AND (m.mode = 'W'
                    OR NOT EXISTS (SELECT 1 FROM {holders} AS h
                                   WHERE h.name = m.name AND h.mode = 'I' AND h.token <> p_token
                                     AND (h.ticket < blocked_ticket
                                          -- a first attempt also yields to an intent of this very millisecond
                                          OR (p_ticket IS NULL AND h.ticket = blocked_ticket))
                                     AND h.expires_at > v_now))),
           false)
    INTO v_granted
    FROM unnest(p_names, p_modes::"char"[], p_permits) AS d(name, mode, default_permits),
         LATERAL (SELECT d.name, d.mode,
                         coalesce((SELECT p.permits FROM {permits} AS p WHERE p.name = d.name AND p.mode = d.mode),
                                  d.default_permits) AS permits
                  OFFSET 0) AS m;

    IF NOT v_granted THEN
        IF p_intent_ttl_ms IS NOT NULL THEN
            INSERT INTO {holders} AS h (name, mode, token, owner, fence, ticket, expires_at)
            SELECT m.name, 'I', p_token, p_owner, NULL, blocked_ticket,
                   clock_timestamp() + p_intent_ttl_ms * interval '1 millisecond'
            FROM unnest(p_names, p_modes::"char"[]) AS m(name, mode)
            WHERE m.mode = 'W'
            ON CONFLICT (name, token, mode) DO UPDATE
            SET expires_at = EXCLUDED.expires_at, ticket = LEAST(h.ticket, EXCLUDED.ticket);
        END IF;
        RETURN;
    END IF;

    -- The group's own intents (a waiting group has a ticket) and, run again, its own rows.
    IF p_ticket IS NOT NULL OR p_again THEN
        FOREACH v_name IN ARRAY p_names LOOP
            WITH gone AS (DELETE FROM {holders} WHERE name = v_name AND token = p_token RETURNING waiting)
            SELECT coalesce(bool_or(waiting), false) INTO v_was_flagged FROM gone;
            IF v_was_flagged THEN
                v_flagged := v_flagged || v_name;
            END IF;
        END LOOP;
    END IF;
    granted_fence := nextval('{sequence}');
    blocked_ticket := NULL;
    INSERT INTO {holders} (name, mode, token, owner, fence, ticket, expires_at, waiting)
    SELECT m.name, m.mode, p_token, p_owner, granted_fence, NULL,
           clock_timestamp() + p_ttl_ms * interval '1 millisecond', m.name = ANY(v_flagged)
    FROM unnest(p_names, p_modes::"char"[]) AS m(name, mode)
    ON CONFLICT (name, token, mode) DO UPDATE
    SET owner = EXCLUDED.owner, fence = EXCLUDED.fence, expires_at = EXCLUDED.expires_at;
END
$distlock$"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(unlogged: bool, notify: bool) -> Layout {
        Layout {
            schema: Identifier::new("schema", "s").unwrap(),
            table: Identifier::new("table", "t").unwrap(),
            sequence: Identifier::new("sequence", "q").unwrap(),
            unlogged,
            notify,
        }
    }

    #[test]
    fn group_statements_name_their_objects_after_the_table() {
        let sql = GroupStatements::new(&layout(false, true));
        assert!(
            sql.create_holders.starts_with("CREATE TABLE IF NOT EXISTS \"s\".\"t_holders\""),
            "{}",
            sql.create_holders
        );
        assert!(sql.create_permits.contains("\"s\".\"t_permits\""), "{}", sql.create_permits);
        assert_eq!(
            (sql.holders_table(), sql.permits_table(), sql.function()),
            ("\"s\".\"t_holders\"", "\"s\".\"t_permits\"", "\"s\".\"t_acquire_group_v1\"")
        );
        assert!(sql.create_function.contains("FUNCTION \"s\".\"t_acquire_group_v1\"("), "{}", sql.create_function);
        assert!(sql.create_function.contains("nextval('\"s\".\"q\"')"), "{}", sql.create_function);
        assert!(sql.acquire.contains("FROM \"s\".\"t_acquire_group_v1\"($1"), "{}", sql.acquire);
        assert!(sql.release.contains("pg_notify('distlock:s.t', 'group:' || name)"), "{}", sql.release);
        assert!(sql.set_permits.contains("pg_notify("), "{}", sql.set_permits);
        let unlogged = GroupStatements::new(&layout(true, false));
        assert!(unlogged.create_holders.starts_with("CREATE UNLOGGED TABLE"), "{}", unlogged.create_holders);
        assert!(!unlogged.create_permits.contains("UNLOGGED"), "permits are configuration");
        for statement in [&unlogged.release, &unlogged.withdraw, &unlogged.release_owner, &unlogged.set_permits] {
            assert!(!statement.contains("pg_notify"), "{statement}");
        }
        // The function does not depend on the notification setting: stores on one table
        // share it.
        assert_eq!(sql.create_function, GroupStatements::new(&layout(false, false)).create_function);
    }

    #[test]
    fn the_function_serialises_before_it_reads() {
        let sql = GroupStatements::new(&layout(false, true)).create_function;
        let lock = sql.find("pg_advisory_xact_lock").unwrap();
        let check = sql.find("bool_and").unwrap();
        let draw = sql.find("nextval").unwrap();
        assert!(lock < check && check < draw, "{sql}");
        assert!(sql.contains("coalesce(bool_and("), "an empty group grants nothing");
        assert!(sql.contains("FROM unnest(p_names) AS n ORDER BY 1)) AS k"), "advisory locks in one global order");
    }
}
