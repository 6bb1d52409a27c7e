//! The statements of one layout: every `.sql` file of `src/sql/` with its table names
//! filled in once, when the store is built.
//!
//! | placeholder | filled with (default layout) |
//! |---|---|
//! | `{table}` | `` `distribute_lock` `` |
//! | `{queue}`, `{queue_order}` | `` `distribute_lock_queue` ``, its index |
//! | `{names}`, `{holders}`, `{holders_owner}`, `{places}`, `{permits}` | `` `distribute_lock_names` ``, … |
//! | `{waiters}` | `` `distribute_lock_waiters` `` |
//! | `{values}` | `` `distribute_lock_values` `` |
//!
//! Group statements also hold `{list}` (one `?` per name of the group) and `{rows}` (one
//! row of values per name), filled per call by [`in_list`] and [`rows`]: MySQL has no
//! array parameters. `upgrade/add_placed_at.sql` holds `{upgraded}`, filled per table by
//! [`Statements::upgrade`]. Leading comment lines are not sent.

use distlock_sql::template;

use crate::config::Layout;

/// The server's clock in microseconds since the Unix epoch, as every statement reads it.
macro_rules! now_us {
    () => {
        "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)"
    };
}

macro_rules! files {
    ($($field:ident = $path:literal),* $(,)?) => {
        /// The statements of one store, exactly as it sends them (see
        /// [`MysqlLockStore::statements`](crate::MysqlLockStore::statements)).
        #[derive(Debug, Clone)]
        pub struct Statements {
            /// The lease table, whose name the others derive from.
            table: crate::config::Identifier,
            $(pub(crate) $field: String,)*
        }

        impl Statements {
            pub(crate) fn new(layout: &Layout) -> Self {
                Self { table: layout.table.clone(), $($field: render($path, include_str!(concat!("sql/", $path)), layout),)* }
            }
        }

        /// `(path, text)` of every embedded file.
        #[cfg(test)]
        pub(crate) const FILES: &[(&str, &str)] = &[$(($path, include_str!(concat!("sql/", $path)))),*];
    };
}

files! {
    create_table = "lease/create_table.sql",
    check_table = "lease/check_table.sql",
    acquire = "lease/acquire.sql",
    release = "lease/release.sql",
    extend = "lease/extend.sql",
    inspect = "lease/inspect.sql",
    list = "lease/list.sql",
    create_queue = "queue/create_table.sql",
    ensure_row = "queue/ensure_row.sql",
    lock_lease = "queue/lock_lease.sql",
    head = "queue/head.sql",
    take = "queue/take.sql",
    take_handed = "queue/take_handed.sql",
    leave = "queue/leave.sql",
    remove_place = "queue/remove_place.sql",
    place = "queue/place.sql",
    queue_len = "queue/len.sql",
    queue_places = "queue/places.sql",
    create_names = "group/create_names.sql",
    create_holders = "group/create_holders.sql",
    create_places = "group/create_places.sql",
    create_permits = "group/create_permits.sql",
    ensure_names = "group/ensure_names.sql",
    lock_names = "group/lock_names.sql",
    group_state = "group/state.sql",
    clear_holds = "group/clear.sql",
    clear_places = "group/clear_places.sql",
    hold = "group/hold.sql",
    set_fence = "group/set_fence.sql",
    group_place = "group/place.sql",
    group_extend = "group/extend.sql",
    group_release = "group/release.sql",
    release_owner = "group/release_owner.sql",
    withdraw = "group/withdraw.sql",
    set_permits = "group/set_permits.sql",
    remove_permits = "group/remove_permits.sql",
    permits = "group/permits.sql",
    holders = "group/holders.sql",
    waiting = "group/waiting.sql",
    group_places = "group/places.sql",
    group_list = "group/list.sql",
    create_waiters = "notify/create_table.sql",
    register = "notify/register.sql",
    held = "notify/held.sql",
    listeners = "notify/listeners.sql",
    listen = "notify/listen.sql",
    register_names = "notify/register_names.sql",
    blocked = "notify/blocked.sql",
    listeners_of = "notify/listeners_of.sql",
    purge_waiters = "notify/purge.sql",
    forget_waiter = "notify/forget.sql",
    create_values = "value/create_table.sql",
    set_value = "value/set.sql",
    inspect_value = "value/inspect.sql",
    add_placed_at = "upgrade/add_placed_at.sql",
}

impl Statements {
    /// The acquire statement (`INSERT … ON DUPLICATE KEY UPDATE`). It binds key, token,
    /// TTL in ms, token, token, token, TTL in ms; the key was taken exactly when the OK
    /// packet's last insert id is not 0, and that id is then the fence.
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn acquire(&self) -> &str {
        &self.acquire
    }

    /// The release statement (a token-checked `UPDATE`). It binds key, token, key, token,
    /// key, token; one row matched means released (the insert id then tells whether
    /// waiters are to be woken: see `lease/release.sql`).
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn release(&self) -> &str {
        &self.release
    }

    /// The statements that give the queue and places tables of a layout created without
    /// it their `placed_at` column, per table: a check that fails (error 1054) when the
    /// column is missing, the `ALTER TABLE`, and an `UPDATE` that dates the places
    /// already taken. [`ensure_schema`](crate::MysqlLockStore::ensure_schema) runs them
    /// when the check fails.
    pub fn upgrade(&self) -> [[String; 3]; 2] {
        ["queue", "places"].map(|suffix| {
            let table = self.table.derived(suffix).quoted();
            let mut statements =
                self.add_placed_at.split(";\n").map(|statement| statement.replace("{upgraded}", &table));
            std::array::from_fn(|_| statements.next().unwrap_or_default())
        })
    }

    /// The `CREATE TABLE IF NOT EXISTS` statements of the layout, in order.
    pub fn ddl(&self) -> [&str; 8] {
        [
            &self.create_table,
            &self.create_waiters,
            &self.create_queue,
            &self.create_names,
            &self.create_holders,
            &self.create_places,
            &self.create_permits,
            &self.create_values,
        ]
    }
}

/// The placeholders of the layout's objects and the suffix each adds to the table name.
const OBJECTS: [(&str, &str); 10] = [
    ("table", ""),
    ("queue", "queue"),
    ("queue_order", "queue_order"),
    ("names", "names"),
    ("holders", "holders"),
    ("holders_owner", "holders_owner"),
    ("places", "places"),
    ("permits", "permits"),
    ("waiters", "waiters"),
    ("values", "values"),
];

/// The placeholders filled per call ([`in_list`], [`rows`], [`Statements::upgrade`]).
const PER_CALL: [&str; 3] = ["list", "rows", "upgraded"];

fn render(path: &str, text: &str, layout: &Layout) -> String {
    template::render_for_table(path, text, &layout.table, &OBJECTS, &PER_CALL)
}

/// `statement` with each `{list}` replaced by `n` comma-separated `?`.
pub(crate) fn in_list(statement: &str, n: usize) -> String {
    statement.replace("{list}", &vec!["?"; n].join(", "))
}

/// `statement` with `{rows}` replaced by `n` copies of `row`, comma-separated.
pub(crate) fn rows(statement: &str, row: &str, n: usize) -> String {
    statement.replace("{rows}", &vec![row; n].join(", "))
}

/// The row of `group/ensure_names.sql`: (name, fence 0).
pub(crate) const NAME_ROW: &str = "(?, 0)";
/// The row of `group/hold.sql`: (name, token, mode, owner, fence, TTL ms).
pub(crate) const HOLD_ROW: &str = concat!("(?, ?, ?, ?, ?, ", now_us!(), " + ? * 1000)");
/// The row of `group/place.sql`: (name, token, mode, ticket, TTL ms).
pub(crate) const PLACE_ROW: &str = concat!("(?, ?, ?, ?, ", now_us!(), ", ", now_us!(), " + ? * 1000)");

/// The row of `notify/register_names.sql`: (name, listener id, ms); the token is `''`.
pub(crate) const WAITER_ROW: &str = concat!("(?, ?, ", now_us!(), " + ? * 1000)");

/// A duration in whole milliseconds, as the statements take TTLs.
pub(crate) fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Identifier;

    #[test]
    fn every_placeholder_is_filled_but_the_per_call_ones() {
        let layout = Layout { table: Identifier::new("table", "leases").unwrap(), notify: true };
        let sql = Statements::new(&layout);
        for (path, text) in FILES {
            let rendered = render(path, text, &layout);
            let rest = rendered.replace("{list}", "").replace("{rows}", "").replace("{upgraded}", "");
            assert!(!rest.contains('{'), "{path}: {rendered}");
            assert!(!rendered.starts_with("--"), "{path}");
        }
        assert!(sql.acquire.contains("`leases`"));
        assert!(sql.create_queue.contains("`leases_queue_order`"));
        let [queue, places] = sql.upgrade();
        assert_eq!(queue[0], "SELECT placed_at FROM `leases_queue` LIMIT 0");
        assert!(queue[1].starts_with("ALTER TABLE `leases_queue` ADD COLUMN placed_at"), "{}", queue[1]);
        assert!(places[2].starts_with("UPDATE `leases_places` SET placed_at"), "{}", places[2]);
        for row in [HOLD_ROW, PLACE_ROW, WAITER_ROW] {
            assert!(row.contains("CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000"), "{row}");
        }
        for (path, text) in FILES {
            let unix = text.matches("UNIX_TIMESTAMP").count();
            assert_eq!(unix, text.matches(now_us!()).count(), "{path}: the clock is read as now_us!()");
        }
    }

    #[test]
    fn every_file_in_the_folder_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sql");
        let mut on_disk = Vec::new();
        for sub in std::fs::read_dir(&dir).unwrap() {
            let sub = sub.unwrap().path();
            // Embedded (and checked) by `idempotency.rs`, a store of its own.
            if sub.ends_with("idempotency") {
                continue;
            }
            for file in std::fs::read_dir(&sub).unwrap() {
                let file = file.unwrap().path();
                let name = file.strip_prefix(&dir).unwrap().to_string_lossy().into_owned();
                on_disk.push(name);
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(path, _)| (*path).to_owned()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
    }

    #[test]
    fn a_value_column_holds_the_longest_value() {
        let sql = Statements::new(&Layout::default());
        let column = format!("value VARBINARY({}) NOT NULL", distlock_api::LeaseValue::MAX_LEN);
        assert!(sql.create_values.contains(&column), "{}", sql.create_values);
        assert!(sql.create_values.contains("`distribute_lock_values`"));
    }

    #[test]
    fn lists_and_rows_expand() {
        assert_eq!(in_list("a IN ({list}) OR b IN ({list})", 2), "a IN (?, ?) OR b IN (?, ?)");
        assert_eq!(rows("VALUES {rows}", NAME_ROW, 2), "VALUES (?, 0), (?, 0)");
    }
}
