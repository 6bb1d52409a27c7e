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
//! 0. answers a waiting group's retry without any lock when a live hold or an older live
//!    place of the other mode blocks one of its members and its places have more than
//!    half their time left: the locked check would block it too, and nothing needs
//!    writing. Queued readers' retries then do not queue for a name's advisory lock ahead
//!    of the writer they wait for (nor that writer's retries while readers hold it);
//! 1. takes `pg_advisory_xact_lock(hashtextextended(name, 0))` for every name, in the
//!    order of the lock keys (one global order: no deadlocks, also when two names hash
//!    alike; a collision only serialises two names more than needed). Acquirers of a
//!    name now run one after the other, and the locks end with the transaction, so
//!    transaction poolers are fine. One or two names take them in plain expressions;
//! 2. run again after a lost connection (`p_again`), recognises a group its token already
//!    holds whole (the first run committed before its answer was lost) and returns that
//!    fence;
//! 3. draws one fence from the store's sequence (after every earlier grant of these names
//!    committed, so it is larger than their fences; a blocked attempt leaves a gap);
//! 4. a first attempt on names whose rows are all free takes slot 0 of each in one
//!    `INSERT … ON CONFLICT (name, slot) DO UPDATE … WHERE token IS NULL` (the common,
//!    uncontended case: one small statement, a HOT update; one or two names are read
//!    element by element, not through `unnest`);
//! 5. a first attempt blocked for certain — by a live hold, or an older live place, of the
//!    other mode on one of its names — records its places as in step 7 (in its own, a free
//!    or a new slot; stale holds stay for a later full check to free) and returns the
//!    ticket, without the full check (which would not pass it either): blocked attempts,
//!    such as the readers that return while a writer waits, hold the names' locks for
//!    less time, and the writer's granting retry queues for less behind them (a retry
//!    that gets this far was not blocked so in step 0 a moment before);
//! 6. otherwise checks every member and takes the slots in one statement — the function
//!    is `VOLATILE`, so each statement takes a fresh snapshot, which includes every grant
//!    committed before the advisory locks were ours — against the live holders, the live
//!    older places of waiting groups (counted as holders of their mode) and the permits
//!    row of (name, mode), else the member's default; `coalesce(bool_and(…), false)` so that nothing is granted for no
//!    member. A member's slot is the group's own intent, else the lowest free slot, else
//!    a new one. A hold of another group that ended by the check's time but is not freed
//!    (*stale*) does not count, but an `extend` of it may be in flight: then the statement
//!    takes nothing, an `UPDATE` frees the stale rows — it locks them, so such an `extend`
//!    is waited for and re-checked (it either committed first, and the hold is live and
//!    counts, or finds the row freed and reports it not held) — and the check runs again:
//!    an ended hold is never counted free and revived at the same time;
//! 7. blocked: records or refreshes the places of its members (of its exclusive members
//!    only when barging; when asked) in slots as above, and returns the ticket.
//!
//! Rows are never deleted by these operations: releases free them (`token = NULL`) and
//! grants take them again, so the table holds one row per slot a name ever needed at
//! once, and its updates are HOT (no index entries written), as on the lease table. The
//! purge deletes rows whose lease ended before its horizon.
//!
//! # Release notifications
//!
//! Holds carry the `waiting` flag of the lease table's protocol (see `sql.rs`): a
//! waiter registers for `group:<name>` and `group-shared:<name>` of each of its names,
//! then, in one statement ([`GroupStatements::wait`]), checks whether its request could be
//! granted now and flags the rows that keep it from being granted; a release, a
//! withdrawal or `release_owner` notifies for the flagged rows it frees: `group:<name>`
//! for exclusive holds and places, `group-shared:<name>` for shared ones. A waiter that
//! no shared row blocks drops its `group-shared:` registrations after the check: readers
//! queued behind a writer's place sleep through the releases of the readers the writer
//! waits for (each woke every queued reader, whose retries then competed with the
//! writer's for the name's advisory lock). A grant carries the flag of its own intent over
//! to its new hold (the same row), so readers that waited on a writer's intent are woken
//! when that writer releases. Permit changes always notify `group:<name>`, which every
//! waiter keeps.

use crate::config::{Identifier, Layout};
use crate::notify::channel_name;

/// The payload prefix of group notifications for a freed exclusive hold or place and for
/// a permits change, which any waiter of the name may wait for: `group:<store key>` never
/// equals a single lock's payload (a store key, `lock:<key>`).
pub(crate) const GROUP_PAYLOAD_PREFIX: &str = "group:";

/// The payload prefix of group notifications for a freed shared hold or place
/// (`group-shared:<store key>`): only waiters that a shared row blocks (exclusive members,
/// members with permits) wait for it, so readers queued behind a writer's place are not
/// woken by every release of the readers the writer waits for.
pub(crate) const SHARED_PAYLOAD_PREFIX: &str = "group-shared:";

/// The columns the group statements use, per table.
pub(crate) const HOLDER_COLUMNS: [&str; 9] =
    ["name", "slot", "mode", "token", "owner", "fence", "ticket", "expires_at", "waiting"];
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
    pub(crate) waiting: String,
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
    /// The holders table, qualified and quoted, e.g. `"public"."distribute_lock_holders"`.
    pub fn holders_table(&self) -> &str {
        &self.holders_table
    }

    /// The permits table, qualified and quoted, e.g. `"public"."distribute_lock_permits"`.
    pub fn permits_table(&self) -> &str {
        &self.permits_table
    }

    /// The grant function, qualified and quoted, e.g.
    /// `"public"."distribute_lock_acquire_group_v6"`.
    pub fn function(&self) -> &str {
        &self.function
    }

    /// One attempt: `SELECT granted_fence, blocked_ticket FROM <function>($1 names text[],
    /// $2 modes text[] ('R' shared, 'W' exclusive), $3 default permits int4[] (NULL:
    /// unlimited), $4 token uuid, $5 owner text, $6 TTL ms, $7 intent TTL ms or NULL,
    /// $8 ticket or NULL, $9 whether the call is run again after a lost connection, $10
    /// whether a blocked attempt leaves places for every member, not only exclusive ones)`: one
    /// row, the fence when granted, else the ticket. Run again, it recognises a group its
    /// token already holds whole and returns that fence.
    pub fn acquire(&self) -> &str {
        &self.acquire
    }

    /// `$1` names, `$2` token, `$3` TTL ms → rows affected: the live holds extended.
    pub fn extend(&self) -> &str {
        &self.extend
    }

    /// `$1` names, `$2` token → one row `(live holds freed, notifications)`; frees the
    /// token's live holds and its intents of those names (`token = NULL`) and notifies the
    /// names of freed rows a waiter flagged.
    pub fn release(&self) -> &str {
        &self.release
    }

    /// `$1` names, `$2` token: frees the token's intents of those names, notifying as
    /// [`release`](Self::release) does.
    pub fn withdraw(&self) -> &str {
        &self.withdraw
    }

    /// `$1` owner → one row `(live holds freed, notifications)`; frees every live hold and
    /// intent of the owner (the owner index).
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

    /// Run by a waiter after it registered, with its request: `$1` names, `$2` modes, `$3`
    /// default permits, `$4` token, `$5` ticket or NULL → one row `(blocking rows that may
    /// not be flagged, blocking rows, µs until the first blocking row ends, whether a
    /// shared hold or place blocks)`: the rows of other groups that keep the request from
    /// being granted now, flagging those not flagged yet. No blocking row: the request
    /// could be granted now.
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
        let function_name = layout.table.derived("acquire_group_v6");
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
        // Frees the rows of `which` (a condition on `token`/`owner`): its live holds and all
        // its intents (a hold that ended stays until a grant or the purge reclaims it); the
        // count of holds freed, and a notification per freed flagged row (PostgreSQL folds
        // equal notifications of one transaction).
        let free_and_notify = |which: &str| {
            let notify = if layout.notify {
                format!(
                    "count(CASE WHEN waiting THEN pg_notify('{channel}', \
                         CASE WHEN mode IN ('R', 'J') THEN '{SHARED_PAYLOAD_PREFIX}' ELSE '{GROUP_PAYLOAD_PREFIX}' END \
                         || name)::text END)"
                )
            } else {
                "0::bigint".to_owned()
            };
            format!(
                "WITH freed AS ( \
                     UPDATE {holders} SET token = NULL, expires_at = clock_timestamp() \
                     WHERE {which} AND (mode IN ('I', 'J') OR expires_at > clock_timestamp()) \
                     RETURNING name, mode, waiting) \
                 SELECT count(*) FILTER (WHERE mode NOT IN ('I', 'J')), {notify} FROM freed"
            )
        };
        let notify_name = |source: &str| {
            if layout.notify {
                format!("SELECT count(pg_notify('{channel}', '{GROUP_PAYLOAD_PREFIX}' || name)::text) FROM {source}")
            } else {
                format!("SELECT count(*) FROM {source}")
            }
        };
        // `$1`, the names, read through a scalar subquery, which the planner does not look
        // into: a custom plan for the actual (mostly one-element) array looks cheaper than
        // the generic plan, so PostgreSQL would plan the statement again at every call;
        // this way both cost the same and it keeps the generic plan after five calls.
        let names = "(SELECT $1::text[])::text[]";
        Self {
            acquire: format!(
                "SELECT granted_fence, blocked_ticket FROM {function}($1, $2, $3, $4::uuid, $5, $6, $7, $8, $9, $10)"
            ),
            extend: format!(
                "UPDATE {holders} SET expires_at = clock_timestamp() + $3 * interval '1 millisecond' \
                 WHERE name = ANY({names}) AND token = $2::uuid AND mode NOT IN ('I', 'J') \
                   AND expires_at > clock_timestamp()"
            ),
            release: free_and_notify(&format!("name = ANY({names}) AND token = $2::uuid")),
            withdraw: free_and_notify(&format!("name = ANY({names}) AND token = $2::uuid AND mode IN ('I', 'J')")),
            release_owner: free_and_notify("owner = $1 AND token IS NOT NULL"),
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
                 WHERE name = $1 AND token IS NOT NULL AND mode NOT IN ('I', 'J') AND expires_at > clock_timestamp() \
                 ORDER BY fence, token",
                micros_left("expires_at")
            ),
            waiting: format!(
                "SELECT count(*) FROM {holders} \
                 WHERE name = $1 AND token IS NOT NULL AND mode IN ('I', 'J') AND expires_at > clock_timestamp()"
            ),
            // The arrays are read through scalar subqueries, as `names` (see there): the
            // statement is planned once per connection, not at every wait. The request's members with their permits; the live rows of other groups on
            // their names; of those, the ones that keep the request from being granted now
            // (the grant function's check, read without its locks: a stale answer only
            // costs a spurious or a later wake-up, never a missed one, because the waiter
            // registered first), and how many of them must be released before it could be
            // (every row of the other mode; of its own mode, as many as keep the holders at
            // or above the permits). The UPDATE flags the blocking rows not flagged yet; a
            // blocking row of the snapshot that is neither flagged there nor by the UPDATE
            // was freed meanwhile (or flagged by a waiter this snapshot cannot see): the
            // caller returns at once, as it does when nothing blocks. A row another
            // transaction has locked (a release, a grant, another waiter flagging it) is
            // skipped, not waited for, and counts as such a row: a waiter never waits for
            // a row lock, so it can never be part of a deadlock.
            wait: format!(
                "WITH m AS MATERIALIZED ( \
                     SELECT d.name, d.mode, \
                         coalesce((SELECT p.permits FROM {permits} AS p WHERE p.name = d.name AND p.mode = d.mode), \
                                  d.default_permits) AS permits \
                     FROM unnest((SELECT $1::text[]), (SELECT $2::\"char\"[]), (SELECT $3::int4[])) \
                         AS d(name, mode, default_permits)), \
                 now AS MATERIALIZED (SELECT clock_timestamp() AS at), \
                 live AS MATERIALIZED ( \
                     SELECT h.name, h.slot, h.token, h.expires_at, h.waiting, \
                         CASE h.mode WHEN 'I' THEN 'W'::\"char\" WHEN 'J' THEN 'R'::\"char\" ELSE h.mode END AS mode, \
                         h.mode NOT IN ('I', 'J') \
                             OR $5 IS NULL OR h.ticket < $5 AS counts \
                     FROM {holders} AS h, now \
                     WHERE h.name = ANY({names}) AND h.token <> $4::uuid AND h.expires_at > now.at), \
                 tally AS MATERIALIZED ( \
                     SELECT m.name, m.mode, m.permits, \
                         count(*) FILTER (WHERE l.counts AND l.mode <> m.mode) AS other, \
                         count(*) FILTER (WHERE l.counts AND l.mode = m.mode) AS same \
                     FROM m LEFT JOIN live AS l ON l.name = m.name \
                     GROUP BY m.name, m.mode, m.permits), \
                 blocking AS MATERIALIZED ( \
                     SELECT l.name, l.slot, l.token, l.expires_at, l.waiting, l.mode \
                     FROM tally AS t JOIN live AS l ON l.name = t.name \
                     WHERE l.counts \
                       AND (l.mode <> t.mode OR (t.permits IS NOT NULL AND t.same >= t.permits))), \
                 lockable AS ( \
                     SELECT h.ctid AS row_id FROM {holders} AS h JOIN blocking AS b \
                         ON h.name = b.name AND h.slot = b.slot AND h.token = b.token \
                     WHERE NOT h.waiting \
                     FOR UPDATE OF h SKIP LOCKED), \
                 flagged AS ( \
                     UPDATE {holders} AS h SET waiting = true FROM lockable AS k \
                     WHERE h.ctid = k.row_id AND NOT h.waiting AND h.expires_at > clock_timestamp() \
                     RETURNING h.name, h.slot) \
                 SELECT count(*) FILTER (WHERE NOT b.waiting AND f.name IS NULL), count(*), {}, \
                     coalesce(bool_or(b.mode = 'R'), false), \
                     (SELECT coalesce(sum(t.other + CASE WHEN t.permits IS NOT NULL AND t.same >= t.permits \
                                                         THEN t.same - t.permits + 1 ELSE 0 END), 0)::bigint \
                      FROM tally AS t) \
                 FROM blocking AS b LEFT JOIN flagged AS f ON f.name = b.name AND f.slot = b.slot",
                micros_left("min(b.expires_at)")
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
            // Holds and places in one table, one row per slot of a name: `mode` 'R'
            // shared, 'W' exclusive, 'I' and 'J' the place (intent) of a waiting group's
            // exclusive and shared member (no fence; its ticket orders it); `token` NULL: a free slot, which the next grant
            // of the name takes. Grants, releases and lease updates change no indexed
            // column (the owner only when another owner takes a slot), so they are HOT
            // updates, as on the lease table. No CHECK constraints: PostgreSQL would read
            // their expressions again at every statement, and only the store's statements
            // write the table.
            create_holders: format!(
                "CREATE {unlogged}TABLE IF NOT EXISTS {holders} ( \
                     name text COLLATE \"C\" NOT NULL, \
                     slot integer NOT NULL, \
                     mode \"char\" NOT NULL, \
                     token uuid, \
                     owner text NOT NULL, \
                     fence bigint, \
                     ticket bigint, \
                     expires_at timestamptz NOT NULL, \
                     waiting boolean NOT NULL DEFAULT false, \
                     PRIMARY KEY (name, slot) \
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
    // Per member: its permits (the permits row, else its default), what the other rows of
    // its name say (holders of its mode and of the other mode, the older places of waiting
    // groups of its mode and whether one is of the other mode, holds that ended by
    // `v_now`), whether it can be granted, and the slot its row goes to: the group's own
    // row of the name (a place), else the lowest free slot, else a new one. A first
    // attempt (no ticket yet) yields to every place recorded before it. Older places
    // count as holders of their mode ('I' exclusive, 'J' shared).
    let older = "AND h.token <> p_token AND h.expires_at > v_now \
                 AND h.ticket < blocked_ticket";
    let members = format!(
        "SELECT d.name, d.mode, coalesce(a.own, a.free, a.top + 1, 0) AS slot, \
                a.other = 0 AND NOT a.yields AND (p.permits IS NULL OR a.same + a.queued < p.permits) AS ok, \
                a.stale \
         FROM unnest(p_names, p_modes::\"char\"[], p_permits) AS d(name, mode, default_permits), \
              LATERAL (SELECT coalesce((SELECT p.permits FROM {permits} AS p \
                                        WHERE p.name = d.name AND p.mode = d.mode), \
                                       d.default_permits) AS permits) AS p, \
              LATERAL (SELECT \
                  count(*) FILTER (WHERE h.mode = d.mode AND h.token <> p_token AND h.expires_at > v_now) AS same, \
                  count(*) FILTER (WHERE h.mode <> d.mode AND h.mode NOT IN ('I', 'J') AND h.token <> p_token \
                                     AND h.expires_at > v_now) AS other, \
                  count(*) FILTER (WHERE h.mode IN ('I', 'J') AND (h.mode = 'I') = (d.mode = 'W') {older}) AS queued, \
                  coalesce(bool_or(h.mode IN ('I', 'J') AND (h.mode = 'I') <> (d.mode = 'W') {older}), false) \
                      AS yields, \
                  coalesce(bool_or(h.mode NOT IN ('I', 'J') AND h.token <> p_token AND h.expires_at <= v_now), false) \
                      AS stale, \
                  min(h.slot) FILTER (WHERE h.token = p_token) AS own, \
                  min(h.slot) FILTER (WHERE h.token IS NULL OR (h.mode IN ('I', 'J') AND h.expires_at <= v_now)) \
                      AS free, \
                  max(h.slot) AS top \
                  FROM {holders} AS h WHERE h.name = d.name) AS a"
    );
    // The fast path's slot 0: taken only when free.
    let take_free = "ON CONFLICT (name, slot) DO UPDATE \
                     SET mode = EXCLUDED.mode, token = EXCLUDED.token, owner = EXCLUDED.owner, \
                         fence = EXCLUDED.fence, ticket = NULL, expires_at = EXCLUDED.expires_at, waiting = false \
                     WHERE h.token IS NULL";
    // Taking a slot: free, the group's own, or an intent that ended (intents are only
    // written under the names' locks, so no one else can revive it).
    let take = "WHERE h.token IS NULL OR h.token = EXCLUDED.token OR (h.mode IN ('I', 'J') AND h.expires_at <= v_now)";
    // Recording a place in a slot taken as above; a place of its own keeps its older ticket.
    let place = format!(
        "ON CONFLICT (name, slot) DO UPDATE \
         SET mode = EXCLUDED.mode, token = EXCLUDED.token, owner = EXCLUDED.owner, fence = NULL, \
             ticket = CASE WHEN h.token = EXCLUDED.token AND h.mode IN ('I', 'J') \
                           THEN LEAST(h.ticket, EXCLUDED.ticket) ELSE EXCLUDED.ticket END, \
             expires_at = EXCLUDED.expires_at, \
             waiting = h.waiting AND h.token IS NOT DISTINCT FROM EXCLUDED.token \
         {take}"
    );
    format!(
        r#"CREATE OR REPLACE FUNCTION {function}(
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
            {take_free};
        ELSIF cardinality(p_names) = 2 THEN
            INSERT INTO {holders} AS h (name, slot, mode, token, owner, fence, ticket, expires_at, waiting)
            SELECT m.name, 0, m.mode::"char", p_token, p_owner, granted_fence, NULL,
                   clock_timestamp() + p_ttl_ms * interval '1 millisecond', false
            FROM (VALUES (p_names[1], p_modes[1]), (p_names[2], p_modes[2])) AS m(name, mode)
            WHERE NOT EXISTS (SELECT 1 FROM {holders} AS x
                              WHERE x.name IN (p_names[1], p_names[2]) AND x.token IS NOT NULL)
            {take_free};
        ELSE
            INSERT INTO {holders} AS h (name, slot, mode, token, owner, fence, ticket, expires_at, waiting)
            SELECT m.name, 0, m.mode, p_token, p_owner, granted_fence, NULL,
                   clock_timestamp() + p_ttl_ms * interval '1 millisecond', false
            FROM unnest(p_names, p_modes::"char"[]) AS m(name, mode)
            WHERE NOT EXISTS (SELECT 1 FROM {holders} AS x
                              WHERE x.name = ANY(p_names) AND x.token IS NOT NULL)
            {take_free};
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
            INSERT INTO {holders} AS h (name, slot, mode, token, owner, fence, ticket, expires_at, waiting)
            SELECT m.name, coalesce(s.own, s.free, s.top + 1, 0),
                   CASE m.mode WHEN 'W' THEN 'I'::"char" ELSE 'J'::"char" END, p_token, p_owner, NULL,
                   blocked_ticket, clock_timestamp() + p_intent_ttl_ms * interval '1 millisecond', false
            FROM unnest(p_names, p_modes::"char"[]) AS m(name, mode),
                 LATERAL (SELECT min(f.slot) FILTER (WHERE f.token = p_token) AS own,
                                 min(f.slot) FILTER (WHERE f.token IS NULL
                                                       OR (f.mode IN ('I', 'J') AND f.expires_at <= v_now)) AS free,
                                 max(f.slot) AS top
                          FROM {holders} AS f WHERE f.name = m.name) AS s
            WHERE p_fair OR m.mode = 'W'
            {place};
        END IF;
        RETURN;
    END IF;

    -- Check and take, in one statement on a snapshot taken now that the locks are ours.
    -- A hold that ended by `v_now` (stale) does not count, but an `extend` of it may be
    -- in flight: then nothing is taken, and the second pass comes after an UPDATE that
    -- frees those rows, which waits for such an extend.
    FOR v_pass IN 1..2 LOOP
        WITH c AS MATERIALIZED ({members}),
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
            {take}
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
        INSERT INTO {holders} AS h (name, slot, mode, token, owner, fence, ticket, expires_at, waiting)
        SELECT i.name, i.slot, i.mode, p_token, p_owner, NULL, blocked_ticket,
               clock_timestamp() + p_intent_ttl_ms * interval '1 millisecond', false
        FROM unnest(v_intent_names, v_intent_slots, v_intent_modes) AS i(name, slot, mode)
        {place};
    END IF;
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
            ("\"s\".\"t_holders\"", "\"s\".\"t_permits\"", "\"s\".\"t_acquire_group_v6\"")
        );
        assert!(sql.create_function.contains("FUNCTION \"s\".\"t_acquire_group_v6\"("), "{}", sql.create_function);
        assert!(sql.create_function.contains("nextval('\"s\".\"q\"')"), "{}", sql.create_function);
        assert!(sql.acquire.contains("FROM \"s\".\"t_acquire_group_v6\"($1"), "{}", sql.acquire);
        assert!(sql.release.contains("pg_notify('distlock:s.t', CASE WHEN mode IN ('R', 'J') THEN 'group-shared:' ELSE 'group:' END || name)"), "{}", sql.release);
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
        let draw = sql.find("nextval").unwrap();
        let check = sql.find("bool_and").unwrap();
        assert!(lock < draw && draw < check, "{sql}");
        assert!(sql.contains("WHERE NOT EXISTS (SELECT 1 FROM \"s\".\"t_holders\" AS x"), "the fast path: {sql}");
        assert!(!sql.contains("DELETE"), "slots are freed and taken again, never deleted: {sql}");
        assert!(sql.contains("coalesce(bool_and("), "an empty group grants nothing");
        assert!(
            sql.contains(
                "SET plan_cache_mode = force_generic_plan\nSET enable_bitmapscan = off\nSET enable_seqscan = off"
            ),
            "generic index plans, whatever the table's size or statistics when planned: {sql}"
        );
        let certain = sql.find("IF p_ticket IS NULL AND NOT p_again AND EXISTS (").unwrap();
        assert!(lock < certain && certain < check, "blocked for certain, under the locks, before the check: {sql}");
        assert!(sql.contains("FROM unnest(p_names) AS n ORDER BY 1)) AS k"), "advisory locks in one global order");
    }
}
