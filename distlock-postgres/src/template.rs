//! The `.sql` files under `src/sql/`, embedded at build time, and the names that fill
//! their placeholders.
//!
//! A file is one statement (or the grant function, or a fragment that several statements
//! end with), exactly as the server runs it except for placeholders such as `{table}`
//! where an object of the store's layout is named.
//! [`Names::render`] replaces each with a value derived from the validated
//! [`Identifier`]s of the layout, once, when the store's statements are built:
//!
//! | Placeholder | Value, e.g. |
//! |---|---|
//! | `{schema}` | `"public"` |
//! | `{table}`, `{sequence}` | `"public"."distribute_lock"`, `"public"."distlock_fence_seq"` |
//! | `{holders}`, `{permits}`, `{acquire_group}` | `"public"."distribute_lock_holders"`, … |
//! | `{queue}` | `"public"."distribute_lock_queue"` |
//! | `{values}` | the table of lease values, `"public"."distribute_lock_values"` |
//! | `{expires_index}` | the index on the table's `expires_at`, `"distribute_lock_expires_at"` |
//! | `{holders_owner}`, `{queue_order}` | the indexes, `"distribute_lock_holders_owner"`, … |
//! | `{channel}` | the string literal `'distlock:public.distribute_lock'` |
//! | `{freed_counts}` | `group/freed_counts.sql`, rendered: the end of three group statements |
//! | `{unlogged}` | the keyword `UNLOGGED` for a store configured `unlogged`, else nothing |
//!
//! Every name is a double-quoted identifier (or two, joined by `.`), or, for the
//! notification channel, a single-quoted literal made of identifier characters, `:` and
//! `.`: no value can end the token it stands for, so a configured name cannot change what
//! a statement does; `{unlogged}` only ever renders one of its two fixed values.
//!
//! A statement that differs for a store without release notifications marks the parts
//! that differ: `{notify}` starts text kept only when releases notify, `{silent}` (which
//! may be left out) text kept only when they do not, and `{end}` ends both; sections do
//! not nest. So each statement is one file. Keys, tokens and durations are always bind
//! parameters.

use distlock_sql::template::{self, Fill};

use crate::config::{Identifier, Layout};
use crate::notify::channel_name;

/// One embedded `.sql` file: its path under `src/sql/` and its text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SqlFile {
    pub(crate) path: &'static str,
    pub(crate) text: &'static str,
}

/// Declares one constant per `.sql` file (and, for tests, the list of them all).
macro_rules! sql_files {
    ($($name:ident => $path:literal,)*) => {
        $(pub(crate) const $name: super::SqlFile =
            super::SqlFile { path: $path, text: include_str!(concat!("sql/", $path)) };)*
        #[cfg(test)]
        pub(crate) const ALL: &[super::SqlFile] = &[$($name),*];
    };
}

/// The lease table, its sequence and its schema.
pub(crate) mod lease {
    sql_files! {
        ACQUIRE => "lease/acquire.sql",
        REACQUIRE => "lease/reacquire.sql",
        RELEASE => "lease/release.sql",
        WAIT => "lease/wait.sql",
        EXTEND => "lease/extend.sql",
        INSPECT => "lease/inspect.sql",
        LIST => "lease/list.sql",
        PURGE => "lease/purge.sql",
        SCHEMA_STATE => "lease/schema_state.sql",
        LOCK_SCHEMA => "lease/lock_schema.sql",
        CREATE_SCHEMA => "lease/create_schema.sql",
        CREATE_SEQUENCE => "lease/create_sequence.sql",
        CREATE_TABLE => "lease/create_table.sql",
    }
}

/// Lock groups: the holders and permits tables and the grant function.
pub(crate) mod group {
    sql_files! {
        ACQUIRE => "group/acquire.sql",
        EXTEND => "group/extend.sql",
        RELEASE => "group/release.sql",
        WITHDRAW => "group/withdraw.sql",
        RELEASE_OWNER => "group/release_owner.sql",
        SET_PERMITS => "group/set_permits.sql",
        REMOVE_PERMITS => "group/remove_permits.sql",
        PERMITS => "group/permits.sql",
        HOLDERS => "group/holders.sql",
        WAITING => "group/waiting.sql",
        PLACES => "group/places.sql",
        LIST => "group/list.sql",
        WAIT => "group/wait.sql",
        PURGE => "group/purge.sql",
        STATE => "group/state.sql",
        CREATE_HOLDERS => "group/create_holders.sql",
        CREATE_OWNER_INDEX => "group/create_owner_index.sql",
        CREATE_PERMITS => "group/create_permits.sql",
        ADD_PLACED_AT => "group/add_placed_at.sql",
        CREATE_ACQUIRE_GROUP => "group/acquire_group.sql",
        FREED_COUNTS => "group/freed_counts.sql",
    }
}

/// The queue of fair waiting.
pub(crate) mod queue {
    sql_files! {
        ACQUIRE => "queue/acquire.sql",
        TAKE_HANDED => "queue/take_handed.sql",
        RELEASE => "queue/release.sql",
        RELEASE_ALONE => "queue/release_alone.sql",
        WAIT => "queue/wait.sql",
        LEN => "queue/len.sql",
        PLACES => "queue/places.sql",
        PURGE => "queue/purge.sql",
        EXISTS => "queue/exists.sql",
        CREATE_TABLE => "queue/create_table.sql",
        CREATE_INDEX => "queue/create_index.sql",
        ADD_PLACED_AT => "queue/add_placed_at.sql",
    }
}

/// The values attached to leases.
pub(crate) mod values {
    sql_files! {
        SET => "values/set.sql",
        INSPECT => "values/inspect.sql",
        PURGE => "values/purge.sql",
        EXISTS => "values/exists.sql",
        CREATE_TABLE => "values/create_table.sql",
    }
}

/// The idempotency records (rendered with the idempotency table as the layout's table).
pub(crate) mod idempotency {
    sql_files! {
        CLAIM => "idempotency/claim.sql",
        READ => "idempotency/read.sql",
        RENEW => "idempotency/renew.sql",
        COMPLETE => "idempotency/complete.sql",
        ABANDON => "idempotency/abandon.sql",
        PURGE => "idempotency/purge.sql",
        CREATE_TABLE => "idempotency/create_table.sql",
        CREATE_INDEX => "idempotency/create_index.sql",
    }
}

/// The values of `{unlogged}`: for a logged table, for an `UNLOGGED` one.
const UNLOGGED: [&str; 2] = ["", "UNLOGGED"];

/// The objects of one layout: the values of the placeholders.
#[derive(Debug)]
pub(crate) struct Names {
    pub(crate) holders_name: Identifier,
    pub(crate) permits_name: Identifier,
    pub(crate) acquire_group_name: Identifier,
    /// The queue table, qualified and quoted.
    pub(crate) queue: String,
    /// The table of lease values, qualified and quoted.
    pub(crate) values: String,
    schema: String,
    table: String,
    sequence: String,
    holders: String,
    permits: String,
    acquire_group: String,
    holders_owner: String,
    queue_order: String,
    expires_index: String,
    /// The channel's name, unquoted.
    pub(crate) channel: String,
    channel_literal: String,
    /// `group/freed_counts.sql`, rendered for this layout.
    freed_counts: String,
    /// Whether releases notify: keeps the `{notify}` sections, else the `{silent}` ones.
    notify: bool,
    /// Whether the tables are `UNLOGGED`: the value of `{unlogged}`.
    unlogged: bool,
}

impl Names {
    pub(crate) fn new(layout: &Layout) -> Self {
        let schema = layout.schema.quoted();
        let qualified = |name: &Identifier| format!("{schema}.{}", name.quoted());
        let holders_name = layout.table.derived("holders");
        let permits_name = layout.table.derived("permits");
        let acquire_group_name = layout.table.derived("acquire_group");
        let channel = channel_name(layout);
        let mut names = Self {
            table: qualified(&layout.table),
            sequence: qualified(&layout.sequence),
            holders: qualified(&holders_name),
            permits: qualified(&permits_name),
            acquire_group: qualified(&acquire_group_name),
            holders_owner: layout.table.derived("holders_owner").quoted(),
            queue: qualified(&layout.table.derived("queue")),
            queue_order: layout.table.derived("queue_order").quoted(),
            values: qualified(&layout.table.derived("values")),
            expires_index: layout.table.derived("expires_at").quoted(),
            channel_literal: format!("'{channel}'"),
            channel,
            holders_name,
            permits_name,
            acquire_group_name,
            schema,
            notify: layout.notify,
            unlogged: layout.unlogged,
            freed_counts: String::new(),
        };
        names.freed_counts = names.render(group::FREED_COUNTS);
        names
    }

    /// `file`'s text with every placeholder replaced and only the `{notify}`/`{silent}`
    /// sections of this layout kept (see [`distlock_sql::template::render`]).
    ///
    /// # Panics
    ///
    /// On a placeholder this crate does not define, or a section marker out of place (a
    /// unit test renders every file).
    pub(crate) fn render(&self, file: SqlFile) -> String {
        template::render(file.path, file.text, self.notify, |name| self.value(name).map(Fill::Text))
    }

    fn value(&self, placeholder: &str) -> Option<&str> {
        Some(match placeholder {
            "schema" => &self.schema,
            "table" => &self.table,
            "sequence" => &self.sequence,
            "holders" => &self.holders,
            "permits" => &self.permits,
            "acquire_group" => &self.acquire_group,
            "holders_owner" => &self.holders_owner,
            "queue" => &self.queue,
            "queue_order" => &self.queue_order,
            "values" => &self.values,
            "expires_index" => &self.expires_index,
            "channel" => &self.channel_literal,
            "freed_counts" => &self.freed_counts,
            "unlogged" => UNLOGGED[usize::from(self.unlogged)],
            _ => return None,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;

    use super::*;

    /// The files that are parts of statements (placeholders of other files), not statements.
    pub(crate) fn fragments() -> Vec<SqlFile> {
        vec![group::FREED_COUNTS]
    }

    /// Every embedded file of the lock store (the idempotency store checks its own).
    pub(crate) fn all_files() -> Vec<SqlFile> {
        [lease::ALL, group::ALL, queue::ALL, values::ALL].concat()
    }

    /// The four layouts (notifications on and off, logged and unlogged) on `"s"."t"`.
    pub(crate) fn layouts() -> Vec<Layout> {
        let mut layouts = Vec::new();
        for unlogged in [false, true] {
            for notify in [true, false] {
                layouts.push(Layout {
                    schema: Identifier::new("schema", "s").unwrap(),
                    table: Identifier::new("table", "t").unwrap(),
                    sequence: Identifier::new("sequence", "q").unwrap(),
                    unlogged,
                    notify,
                });
            }
        }
        layouts
    }

    /// `sql` without comments, on one line, with single spaces and no space inside
    /// parentheses.
    pub(crate) fn flat(sql: &str) -> String {
        let code: Vec<&str> = sql.lines().map(|line| line.find("--").map_or(line, |at| &line[..at])).collect();
        code.join(" ").split_whitespace().collect::<Vec<_>>().join(" ").replace("( ", "(").replace(" )", ")")
    }

    fn files_on_disk(dir: &Path, under: &str, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = format!("{under}{}", entry.file_name().to_str().unwrap());
            if entry.file_type().unwrap().is_dir() {
                files_on_disk(&entry.path(), &format!("{name}/"), found);
            } else {
                found.push(name);
            }
        }
    }

    #[test]
    fn every_file_in_the_folder_is_embedded_once() {
        let mut on_disk = Vec::new();
        files_on_disk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sql"), "", &mut on_disk);
        on_disk.sort();
        let files = [all_files(), idempotency::ALL.to_vec()].concat();
        let mut embedded: Vec<String> = files.iter().map(|file| file.path.to_owned()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
        assert!(on_disk.iter().all(|path| path.ends_with(".sql")), "{on_disk:?}");
    }

    #[test]
    fn placeholders_take_quoted_names_only() {
        let names = Names::new(&layouts()[0]);
        for file in all_files() {
            let text = names.render(file);
            assert!(!text.contains('{') && !text.contains('}'), "{}: {text}", file.path);
        }
        assert_eq!(names.render(SqlFile { path: "x", text: "{table}, {holders}" }), "\"s\".\"t\", \"s\".\"t_holders\"");
        assert_eq!(
            names.render(SqlFile { path: "x", text: "pg_notify({channel}, 1)" }),
            "pg_notify('distlock:s.t', 1)"
        );
        assert_eq!(names.acquire_group, "\"s\".\"t_acquire_group\"");
        let long = Layout { table: Identifier::new("table", &"n".repeat(63)).unwrap(), ..layouts()[0].clone() };
        let names = Names::new(&long);
        for placeholder in [
            "schema",
            "table",
            "sequence",
            "holders",
            "permits",
            "acquire_group",
            "holders_owner",
            "queue",
            "queue_order",
            "values",
            "expires_index",
        ] {
            let value = names.value(placeholder).unwrap();
            let parts: Vec<&str> = value.split('.').collect();
            assert!(parts.len() <= 2, "{value}");
            for part in parts {
                let bare = part.strip_prefix('"').and_then(|part| part.strip_suffix('"')).unwrap();
                assert_eq!(Identifier::new("name", bare).unwrap().as_str(), bare, "{placeholder}: {value}");
            }
        }
        let channel = names.value("channel").unwrap();
        let inner = channel.strip_prefix('\'').and_then(|channel| channel.strip_suffix('\'')).unwrap();
        assert!(inner.chars().all(|c| c.is_ascii_alphanumeric() || "_:.".contains(c)), "{channel}");
    }

    #[test]
    fn keywords_and_sections_take_fixed_values_only() {
        for layout in layouts() {
            let names = Names::new(&layout);
            assert_eq!(names.value("freed_counts"), Some(names.render(group::FREED_COUNTS).as_str()));
            assert!(!group::FREED_COUNTS.text.contains("{freed_counts}"), "a fragment includes no fragment");
            let unlogged = names.value("unlogged").unwrap();
            assert!(UNLOGGED.contains(&unlogged), "{unlogged}");
            assert_eq!(unlogged == "UNLOGGED", layout.unlogged, "{layout:?}");
            let sections = SqlFile { path: "x", text: "a{notify} b {channel}{silent} c{end} d{notify} e{end}" };
            let expected = if layout.notify { "a b 'distlock:s.t' d e" } else { "a c d" };
            assert_eq!(names.render(sections), expected, "{layout:?}");
            for file in all_files() {
                let text = flat(&names.render(file));
                for marker in ["notify", "silent", "end", "unlogged"] {
                    assert!(!text.contains(&format!("{{{marker}}}")), "{}: {text}", file.path);
                }
                if !layout.unlogged {
                    assert!(!text.contains("UNLOGGED TABLE"), "{}: {text}", file.path);
                }
                if !layout.notify {
                    assert!(!text.contains("pg_notify"), "{}: {text}", file.path);
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "`{silent}` out of place")]
    fn a_section_marker_out_of_place_is_a_bug() {
        Names::new(&layouts()[0]).render(SqlFile { path: "x", text: "SELECT {silent} 1 {end}" });
    }

    #[test]
    #[should_panic(expected = "without `{end}`")]
    fn an_unended_section_is_a_bug() {
        Names::new(&layouts()[0]).render(SqlFile { path: "x", text: "SELECT 1 {notify} , 2" });
    }

    #[test]
    #[should_panic(expected = "no placeholder `{tabel}`")]
    fn an_unknown_placeholder_is_a_bug() {
        Names::new(&layouts()[0]).render(SqlFile { path: "x", text: "SELECT 1 FROM {tabel}" });
    }
}
