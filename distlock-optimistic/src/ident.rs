//! SQL identifiers: validated, then only ever spliced into SQL double-quoted. Imports
//! nothing from the rest of the crate.

use std::fmt;

/// The longest identifier PostgreSQL keeps whole (`NAMEDATALEN - 1`).
const MAX_LEN: usize = 63;

/// A name that matched `[A-Za-z_][A-Za-z0-9_]{0,62}`, so it can neither inject SQL nor be
/// case-folded or truncated by the server.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Identifier(String);

impl Identifier {
    /// Validates `name`; `what` ("table", "key column"…) goes into the error message.
    pub(crate) fn new(what: &str, name: &str) -> Result<Self, String> {
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if first_ok && rest_ok && name.len() <= MAX_LEN {
            Ok(Self(name.to_owned()))
        } else {
            Err(format!(
                "{what} name {name:?} is not a plain SQL identifier: expected 1 to {MAX_LEN} characters \
                 matching [A-Za-z_][A-Za-z0-9_]*"
            ))
        }
    }
}

impl Identifier {
    /// The name, unquoted (each database quotes it its own way).
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// Writes the identifier double-quoted, ready for SQL text.
impl fmt::Display for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.0)
    }
}

impl fmt::Debug for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass_and_are_quoted() {
        assert_eq!(Identifier::new("table", "posts").unwrap().to_string(), "\"posts\"");
        assert_eq!(Identifier::new("table", "_P2").unwrap().to_string(), "\"_P2\"");
        assert!(Identifier::new("table", &"a".repeat(63)).is_ok());
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in ["", "1a", "a-b", "a b", "a\"b", "posts; DROP TABLE x", "é", &"a".repeat(64)] {
            let err = Identifier::new("table", bad).unwrap_err();
            assert!(err.contains("table name"), "{err}");
        }
    }
}
