//! Statement texts with placeholders, as the SQL stores keep them in `.sql` files.
//!
//! A file is one statement exactly as the server runs it, except for placeholders such
//! as `{table}` where an object of the store's layout is named. [`render`] fills them
//! once, when a store's statements are built:
//!
//! - leading comment lines (`--`) are dropped: they describe the file, not the statement;
//! - each `{name}` becomes what the store's `fill` says: a text (a quoted identifier, a
//!   keyword), or [`Fill::Later`] for a placeholder the store fills per call (such as a
//!   list of `?` as long as a group);
//! - `{notify}` starts text kept only when releases notify, `{silent}` (which may be left
//!   out) text kept only when they do not, and `{end}` ends both; sections do not nest.
//!
//! ```
//! use distlock_sql::template::{render, Fill};
//!
//! let fill = |name: &str| match name {
//!     "table" => Some(Fill::Text("\"locks\"")),
//!     "list" => Some(Fill::Later),
//!     _ => None,
//! };
//! let text = "-- Releases keys.\nDELETE FROM {table} WHERE key IN ({list}){notify} RETURNING key{end}";
//! assert_eq!(render("release.sql", text, false, fill), "DELETE FROM \"locks\" WHERE key IN ({list})");
//! ```

use crate::identifier::{Identifier, IdentifierRules};

/// What a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill<'a> {
    /// This text.
    Text(&'a str),
    /// Itself: the store fills it per call.
    Later,
}

/// Where text is, relative to the `{notify}`/`{silent}`/`{end}` markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    All,
    Notify,
    Silent,
}

/// `text` (the file at `path`, named in panics) without its leading comment lines, with
/// every placeholder filled by `fill` and only the sections of a store whose releases
/// `notify` (or not) kept.
///
/// # Panics
///
/// On a placeholder `fill` does not know, an unclosed `{`, or a section marker out of
/// place. The texts are the store's own files, so each store has a unit test that renders
/// every one of them.
pub fn render<'a>(path: &str, text: &str, notify: bool, fill: impl Fn(&str) -> Option<Fill<'a>>) -> String {
    let start = text.lines().take_while(|line| line.starts_with("--")).map(|line| line.len() + 1).sum::<usize>();
    let mut rest = text.get(start..).unwrap_or_default();
    let mut out = String::with_capacity(rest.len() + 64);
    let mut section = Section::All;
    let keeps = |section: Section| match section {
        Section::All => true,
        Section::Notify => notify,
        Section::Silent => !notify,
    };
    loop {
        let (text, after) = match rest.find('{') {
            Some(open) => (&rest[..open], Some(&rest[open + 1..])),
            None => (rest, None),
        };
        let keep = keeps(section);
        if keep {
            out.push_str(text);
        }
        let Some(after) = after else { break };
        let close = after.find('}').unwrap_or_else(|| panic!("{path}: an unclosed `{{`"));
        let name = &after[..close];
        rest = &after[close + 1..];
        section = match (name, section) {
            ("notify", Section::All) => Section::Notify,
            ("silent", Section::Notify) => Section::Silent,
            ("end", Section::Notify | Section::Silent) => Section::All,
            ("notify" | "silent" | "end", _) => panic!("{path}: `{{{name}}}` out of place"),
            _ => {
                let value = fill(name).unwrap_or_else(|| panic!("{path}: no placeholder `{{{name}}}`"));
                if keep {
                    match value {
                        Fill::Text(value) => out.push_str(value),
                        Fill::Later => {
                            out.push('{');
                            out.push_str(name);
                            out.push('}');
                        }
                    }
                }
                section
            }
        };
    }
    assert!(section == Section::All, "{path}: a `{{notify}}` section without `{{end}}`");
    out
}

/// [`render`] for a layout whose objects are all named after one table: each
/// `(placeholder, suffix)` of `objects` stands for the table's
/// [derived](Identifier::derived) name `<table>_<suffix>` (the table itself for an empty
/// suffix), quoted; the placeholders of `later` are left for the store to fill per call.
///
/// # Panics
///
/// As [`render`].
pub fn render_for_table<R: IdentifierRules>(
    path: &str,
    text: &str,
    table: &Identifier<R>,
    objects: &[(&str, &str)],
    later: &[&str],
) -> String {
    let names: Vec<(&str, String)> = objects
        .iter()
        .map(|&(placeholder, suffix)| {
            (placeholder, if suffix.is_empty() { table.quoted() } else { table.derived(suffix).quoted() })
        })
        .collect();
    render(path, text, true, |name| {
        if later.contains(&name) {
            return Some(Fill::Later);
        }
        names.iter().find(|(placeholder, _)| *placeholder == name).map(|(_, value)| Fill::Text(value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(name: &str) -> Option<Fill<'static>> {
        match name {
            "table" => Some(Fill::Text("\"t\"")),
            "rows" => Some(Fill::Later),
            _ => None,
        }
    }

    #[test]
    fn placeholders_comments_and_sections() {
        let text = "-- one\n-- two\nINSERT INTO {table} VALUES {rows}; -- kept\n{notify}a {table}{silent}b{end} c";
        assert_eq!(render("x", text, true, fill), "INSERT INTO \"t\" VALUES {rows}; -- kept\na \"t\" c");
        assert_eq!(render("x", text, false, fill), "INSERT INTO \"t\" VALUES {rows}; -- kept\nb c");
        assert_eq!(render("x", "-- only a comment", true, fill), "");
    }

    #[test]
    #[should_panic(expected = "x: no placeholder `{tabel}`")]
    fn an_unknown_placeholder_panics() {
        render("x", "SELECT 1 FROM {tabel}", true, fill);
    }

    #[test]
    #[should_panic(expected = "x: `{end}` out of place")]
    fn a_section_marker_out_of_place_panics() {
        render("x", "a{end}", true, fill);
    }

    #[test]
    #[should_panic(expected = "x: a `{notify}` section without `{end}`")]
    fn an_unended_section_panics() {
        render("x", "a{notify}b", true, fill);
    }
}
