//! SQL identifiers: the names of an update's schema, table and columns, checked by the
//! SQL stores' rule (`distlock_sql::Identifier`) and quoted per database when the
//! statement is built. Imports nothing from the rest of the crate.

use distlock_sql::IdentifierRules;

/// The rule of every database an update runs on: at most 63 bytes, the longest name
/// PostgreSQL keeps whole (`NAMEDATALEN - 1`).
#[derive(Debug)]
pub(crate) struct UpdateNames;

impl IdentifierRules for UpdateNames {
    const MAX_LEN: usize = 63;
    const SERVER_MAX_LEN: usize = 63;
    const QUOTE: char = '"';
}

/// A name that matched `[A-Za-z_][A-Za-z0-9_]{0,62}`, so it can neither inject SQL nor be
/// case-folded or truncated by the server.
pub(crate) type Identifier = distlock_sql::Identifier<UpdateNames>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass_and_anything_else_is_refused() {
        for good in ["posts", "_P2", &"a".repeat(63)] {
            assert_eq!(Identifier::new("table", good).unwrap().as_str(), good);
        }
        for bad in ["", "1a", "a-b", "a b", "a\"b", "posts; DROP TABLE x", "é", &"a".repeat(64)] {
            let err = Identifier::new("table", bad).unwrap_err();
            assert!(err.to_string().contains("table name"), "{err}");
        }
    }
}
