//! The `.sql` files under `src/sql/`, embedded at build time, and the names that fill
//! their placeholders.
//!
//! A file is one statement (or the grant function), exactly as the server runs it except
//! for placeholders such as `{table}` where an object of the store's layout is named.
//! [`Names::render`] replaces each with a value derived from the validated
//! [`Identifier`]s of the layout, once, when the store's statements are built:
//!
//! | Placeholder | Value, e.g. |
//! |---|---|
//! | `{schema}` | `"public"` |
//! | `{table}`, `{sequence}` | `"public"."distribute_lock"`, `"public"."distlock_fence_seq"` |
//! | `{holders}`, `{permits}`, `{acquire_group}` | `"public"."distribute_lock_holders"`, … |
//! | `{queue}` | `"public"."distribute_lock_queue"` |
//! | `{holders_owner}`, `{queue_order}` | the indexes, `"distribute_lock_holders_owner"`, … |
//! | `{channel}` | the string literal `'distlock:public.distribute_lock'` |
//!
//! Every value is a double-quoted identifier (or two, joined by `.`), or, for the
//! notification channel, a single-quoted literal made of identifier characters, `:` and
//! `.`: no value can end the token it stands for, so a configured name cannot change what
//! a statement does. Variants of a statement (without release notifications, an
//! `UNLOGGED` table) are separate files. Keys, tokens and durations are always bind
//! parameters.

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
        ACQUIRE_SILENT => "lease/acquire_silent.sql",
        REACQUIRE => "lease/reacquire.sql",
        REACQUIRE_SILENT => "lease/reacquire_silent.sql",
        RELEASE => "lease/release.sql",
        RELEASE_SILENT => "lease/release_silent.sql",
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
        CREATE_UNLOGGED_TABLE => "lease/create_unlogged_table.sql",
    }
}

/// Lock groups: the holders and permits tables and the grant function.
pub(crate) mod group {
    sql_files! {
        ACQUIRE => "group/acquire.sql",
        EXTEND => "group/extend.sql",
        RELEASE => "group/release.sql",
        RELEASE_SILENT => "group/release_silent.sql",
        WITHDRAW => "group/withdraw.sql",
        WITHDRAW_SILENT => "group/withdraw_silent.sql",
        RELEASE_OWNER => "group/release_owner.sql",
        RELEASE_OWNER_SILENT => "group/release_owner_silent.sql",
        SET_PERMITS => "group/set_permits.sql",
        SET_PERMITS_SILENT => "group/set_permits_silent.sql",
        REMOVE_PERMITS => "group/remove_permits.sql",
        REMOVE_PERMITS_SILENT => "group/remove_permits_silent.sql",
        PERMITS => "group/permits.sql",
        HOLDERS => "group/holders.sql",
        WAITING => "group/waiting.sql",
        WAIT => "group/wait.sql",
        PURGE => "group/purge.sql",
        STATE => "group/state.sql",
        CREATE_HOLDERS => "group/create_holders.sql",
        CREATE_UNLOGGED_HOLDERS => "group/create_unlogged_holders.sql",
        CREATE_OWNER_INDEX => "group/create_owner_index.sql",
        CREATE_PERMITS => "group/create_permits.sql",
        CREATE_ACQUIRE_GROUP => "group/acquire_group.sql",
    }
}

/// The queue of fair waiting.
pub(crate) mod queue {
    sql_files! {
        ACQUIRE => "queue/acquire.sql",
        ACQUIRE_SILENT => "queue/acquire_silent.sql",
        RELEASE => "queue/release.sql",
        RELEASE_SILENT => "queue/release_silent.sql",
        WAIT => "queue/wait.sql",
        LEN => "queue/len.sql",
        PURGE => "queue/purge.sql",
        EXISTS => "queue/exists.sql",
        CREATE_TABLE => "queue/create_table.sql",
        CREATE_UNLOGGED_TABLE => "queue/create_unlogged_table.sql",
        CREATE_INDEX => "queue/create_index.sql",
    }
}

/// The objects of one layout: the values of the placeholders.
#[derive(Debug)]
pub(crate) struct Names {
    pub(crate) holders_name: Identifier,
    pub(crate) permits_name: Identifier,
    pub(crate) acquire_group_name: Identifier,
    /// The queue table, qualified and quoted.
    pub(crate) queue: String,
    schema: String,
    table: String,
    sequence: String,
    holders: String,
    permits: String,
    acquire_group: String,
    holders_owner: String,
    queue_order: String,
    /// The channel's name, unquoted.
    pub(crate) channel: String,
    channel_literal: String,
    /// Whether releases notify: picks the variant of the statements that notify.
    notify: bool,
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
        Self {
            table: qualified(&layout.table),
            sequence: qualified(&layout.sequence),
            holders: qualified(&holders_name),
            permits: qualified(&permits_name),
            acquire_group: qualified(&acquire_group_name),
            holders_owner: layout.table.derived("holders_owner").quoted(),
            queue: qualified(&layout.table.derived("queue")),
            queue_order: layout.table.derived("queue_order").quoted(),
            channel_literal: format!("'{channel}'"),
            channel,
            holders_name,
            permits_name,
            acquire_group_name,
            schema,
            notify: layout.notify,
            unlogged: layout.unlogged,
        }
    }

    /// `file`'s text with every placeholder replaced.
    ///
    /// # Panics
    ///
    /// On a placeholder this crate does not define (a unit test renders every file).
    pub(crate) fn render(&self, file: SqlFile) -> String {
        let mut out = String::with_capacity(file.text.len() + 64);
        let mut rest = file.text;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let close = after.find('}').unwrap_or_else(|| panic!("{}: an unclosed `{{`", file.path));
            let name = &after[..close];
            out.push_str(self.value(name).unwrap_or_else(|| panic!("{}: no placeholder `{{{name}}}`", file.path)));
            rest = &after[close + 1..];
        }
        out.push_str(rest);
        out
    }

    /// Renders `with` when releases notify, else `without`.
    pub(crate) fn notifying(&self, with: SqlFile, without: SqlFile) -> String {
        self.render(if self.notify { with } else { without })
    }

    /// Renders `unlogged` for an `UNLOGGED` layout, else `logged`.
    pub(crate) fn persistent(&self, logged: SqlFile, unlogged: SqlFile) -> String {
        self.render(if self.unlogged { unlogged } else { logged })
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
            "channel" => &self.channel_literal,
            _ => return None,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;

    use super::*;

    /// Every embedded file.
    pub(crate) fn all_files() -> Vec<SqlFile> {
        [lease::ALL, group::ALL, queue::ALL].concat()
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
        let mut embedded: Vec<String> = all_files().iter().map(|file| file.path.to_owned()).collect();
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
    #[should_panic(expected = "no placeholder `{tabel}`")]
    fn an_unknown_placeholder_is_a_bug() {
        Names::new(&layouts()[0]).render(SqlFile { path: "x", text: "SELECT 1 FROM {tabel}" });
    }
}
