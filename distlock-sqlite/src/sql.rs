//! The `.sql` files under `src/sql/`, embedded at build time, rendered once per store
//! with the names of its tables.
//!
//! A file is one statement (the schema file: the `CREATE … IF NOT EXISTS` statements),
//! exactly as SQLite runs it except for placeholders where a table or index is named:
//!
//! | Placeholder | Value for the default table `distlock` |
//! |---|---|
//! | `{leases}` | `"distlock"` |
//! | `{boots}`, `{counter}`, `{queue}`, `{holders}`, `{intents}`, `{permits}`, `{waiters}`, `{values}` | `"distlock_counter"`, … |
//! | `{queue_order}`, `{holders_owner}`, `{waiters_socket}` | the indexes, `"distlock_queue_order"`, … |
//!
//! Every value is a double-quoted identifier made from the validated table name, so a
//! configured name cannot change what a statement does. Keys, tokens and instants are
//! always bind parameters; lists of them are bound as one JSON array (`json_each`).

use crate::config::Identifier;

/// Declares one field per `.sql` file and renders them all.
macro_rules! statements {
    ($($field:ident => $path:literal,)*) => {
        /// The store's statements, rendered for its table names, exactly as it sends them
        /// (see [`SqliteLockStore::statements`](crate::SqliteLockStore::statements)).
        #[derive(Debug)]
        pub struct Statements {
            $(pub(crate) $field: String,)*
        }

        impl Statements {
            pub(crate) fn new(table: &Identifier) -> Self {
                Self { $($field: render($path, include_str!(concat!("sql/", $path)), table),)* }
            }
        }

        #[cfg(test)]
        const FILES: &[(&str, &str)] = &[$(($path, include_str!(concat!("sql/", $path)))),*];
    };
}

statements! {
    create => "schema/create.sql",
    queue_placed_probe => "schema/queue_placed_probe.sql",
    queue_placed_add => "schema/queue_placed_add.sql",
    intents_placed_probe => "schema/intents_placed_probe.sql",
    intents_placed_add => "schema/intents_placed_add.sql",
    boot => "schema/boot.sql",
    new_boot => "schema/new_boot.sql",
    raise_counter => "schema/raise_counter.sql",
    purge_boots_leases => "schema/purge_boots_leases.sql",
    purge_boots_queue => "schema/purge_boots_queue.sql",
    purge_boots_holders => "schema/purge_boots_holders.sql",
    purge_boots_intents => "schema/purge_boots_intents.sql",
    purge_boots_values => "schema/purge_boots_values.sql",
    lease_select => "lease/select.sql",
    next_fence => "lease/next_fence.sql",
    lease_put => "lease/put.sql",
    lease_delete => "lease/delete.sql",
    lease_extend => "lease/extend.sql",
    lease_list => "lease/list.sql",
    queue_select => "queue/select.sql",
    queue_put => "queue/put.sql",
    queue_leave => "queue/leave.sql",
    queue_purge => "queue/purge.sql",
    waiters_register => "waiters/register.sql",
    waiters_unregister => "waiters/unregister.sql",
    waiters_sockets => "waiters/sockets.sql",
    waiters_forget => "waiters/forget.sql",
    group_holders => "group/holders.sql",
    group_intents => "group/intents.sql",
    group_names => "group/names.sql",
    group_permits_of => "group/permits_of.sql",
    group_purge_holders => "group/purge_holders.sql",
    group_purge_intents => "group/purge_intents.sql",
    group_hold => "group/hold.sql",
    group_intend => "group/intend.sql",
    group_withdraw => "group/withdraw.sql",
    group_release => "group/release.sql",
    group_extend => "group/extend.sql",
    group_release_owner => "group/release_owner.sql",
    group_set_permits => "group/set_permits.sql",
    group_remove_permits => "group/remove_permits.sql",
    group_permits => "group/permits.sql",
    value_set => "value/set.sql",
    value_select => "value/select.sql",
}

impl Statements {
    /// Reads a key's lease: binds the key; returns `token`, `fence`, `boot`, `expires_ms`,
    /// `pid`, `pid_start` and `pid_ns`, or no row.
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn lease_select(&self) -> &str {
        &self.lease_select
    }

    /// Takes the next number of the store's counter (fences and tickets): binds nothing,
    /// returns the number.
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn next_fence(&self) -> &str {
        &self.next_fence
    }

    /// Writes a key's lease (insert or replace): binds key, token, fence, boot id,
    /// expiry in ms of `CLOCK_BOOTTIME`, and the holder's pid, start time and PID
    /// namespace.
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn lease_put(&self) -> &str {
        &self.lease_put
    }

    /// Deletes a key's lease if `token` holds it: binds key, token and the key's
    /// notification channel (`l:` followed by the key); returns the deleted row's `boot`
    /// and `expires_ms` (whether it was still in force) and `sockets`, the space-separated
    /// sockets of the processes waiting on the key (`NULL` for none).
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn lease_delete(&self) -> &str {
        &self.lease_delete
    }

    /// Removes a token's place in a key's queue: binds key and token.
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn queue_leave(&self) -> &str {
        &self.queue_leave
    }

    /// Reads a key's queue, oldest place first: binds the key; returns `token`, `seq`,
    /// `placed_ms`, `boot`, `expires_ms`, `pid`, `pid_start` and `pid_ns` per place.
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn queue_select(&self) -> &str {
        &self.queue_select
    }
}

/// The placeholders and the suffix each one adds to the table name.
const PLACEHOLDERS: [(&str, &str); 12] = [
    ("leases", ""),
    ("boots", "boots"),
    ("counter", "counter"),
    ("queue", "queue"),
    ("queue_order", "queue_order"),
    ("holders", "holders"),
    ("holders_owner", "holders_owner"),
    ("intents", "intents"),
    ("permits", "permits"),
    ("waiters", "waiters"),
    ("waiters_socket", "waiters_socket"),
    ("values", "values"),
];

fn render(path: &str, text: &str, table: &Identifier) -> String {
    distlock_sql::template::render_for_table(path, text, table, &PLACEHOLDERS, &[])
}

/// `items` as a JSON array of strings, for `json_each(?)`.
pub(crate) fn json_array<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let mut json = String::from("[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push('"');
        for c in item.chars() {
            match c {
                '"' => json.push_str("\\\""),
                '\\' => json.push_str("\\\\"),
                c if u32::from(c) < 0x20 => json.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => json.push(c),
            }
        }
        json.push('"');
    }
    json.push(']');
    json
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_rendered() {
        let table = Identifier::new("table", "locks").unwrap();
        for (path, text) in FILES {
            let rendered = render(path, text, &table);
            assert!(!rendered.contains('{') && !rendered.contains('}'), "{path}: {rendered}");
        }
        assert!(Statements::new(&table).lease_select.contains("FROM \"locks\" WHERE"));
        assert!(Statements::new(&table).queue_select.contains("FROM \"locks_queue\""));
    }

    #[test]
    fn json_arrays_escape_quotes_and_backslashes() {
        assert_eq!(json_array(["a", "b\"c", "d\\e", "\u{1}"]), r#"["a","b\"c","d\\e","\u0001"]"#);
        assert_eq!(json_array([]), "[]");
    }
}
