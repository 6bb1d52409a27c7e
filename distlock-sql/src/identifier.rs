//! SQL identifiers: names checked before they are spliced into SQL text, always quoted.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use distlock_api::LockError;

/// What one database accepts as a configured name and how it quotes one.
///
/// Implemented by a store on a type of its own, e.g. `struct PgNames;`.
pub trait IdentifierRules {
    /// The longest name a user may configure, in bytes.
    const MAX_LEN: usize;
    /// The longest name the server keeps, in bytes: a [derived](Identifier::derived) name
    /// that would be longer is shortened with a hash. `usize::MAX` for no limit.
    const SERVER_MAX_LEN: usize;
    /// The character that opens and closes a quoted identifier (`"` or `` ` ``).
    const QUOTE: char;
    /// A prefix (compared without case) the database reserves for its own objects.
    const RESERVED_PREFIX: Option<&'static str> = None;
}

/// A name that matched `[A-Za-z_][A-Za-z0-9_]*`, at most `R::MAX_LEN` bytes, and does not
/// start with `R::RESERVED_PREFIX`.
///
/// Only such names are ever spliced into SQL text, and always quoted, so a configured
/// name can neither inject SQL nor be silently case-folded or truncated by the server.
pub struct Identifier<R> {
    name: String,
    rules: PhantomData<fn() -> R>,
}

impl<R: IdentifierRules> Identifier<R> {
    /// Validates `name`; `what` ("schema", "table"…) goes into the error message.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] naming `what` and `name` when `name` is not such a name.
    pub fn new(what: &str, name: &str) -> Result<Self, LockError> {
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        let reserved = R::RESERVED_PREFIX
            .is_some_and(|prefix| name.to_ascii_lowercase().starts_with(&prefix.to_ascii_lowercase()));
        if first_ok && rest_ok && name.len() <= R::MAX_LEN && !reserved {
            return Ok(Self::unchecked(name.to_owned()));
        }
        let not_reserved =
            R::RESERVED_PREFIX.map(|prefix| format!(", not starting with `{prefix}`")).unwrap_or_default();
        Err(LockError::Config {
            message: format!(
                "{what} name {name:?} is not a plain SQL identifier: expected 1 to {} characters matching \
                 [A-Za-z_][A-Za-z0-9_]*{not_reserved}",
                R::MAX_LEN
            ),
        })
    }

    /// One of a store's constant default names (which the store checks in a unit test).
    pub fn trusted(name: &'static str) -> Self {
        Self::unchecked(name.to_owned())
    }

    fn unchecked(name: String) -> Self {
        Self { name, rules: PhantomData }
    }

    /// The name as configured.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The name quoted, ready for SQL text.
    pub fn quoted(&self) -> String {
        format!("{quote}{}{quote}", self.name, quote = R::QUOTE)
    }

    /// The name of an object that belongs to this one: `<name>_<suffix>`, or, when that
    /// would exceed `R::SERVER_MAX_LEN`, the name cut short followed by `_`, a 32-bit
    /// FNV-1a hash of the whole name in hex and `_<suffix>` (so two long names stay
    /// apart). `suffix` is one of the store's constants: lower-case ASCII letters, digits
    /// and `_`.
    pub fn derived(&self, suffix: &str) -> Self {
        let plain = format!("{}_{suffix}", self.name);
        if plain.len() <= R::SERVER_MAX_LEN {
            return Self::unchecked(plain);
        }
        let hash =
            self.name.bytes().fold(0x811c_9dc5_u32, |hash, byte| (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193));
        // An identifier is ASCII, so any byte offset is a character boundary.
        let keep = R::SERVER_MAX_LEN.saturating_sub(suffix.len() + 10).min(self.name.len());
        Self::unchecked(format!("{}_{hash:08x}_{suffix}", &self.name[..keep]))
    }
}

impl<R> Clone for Identifier<R> {
    fn clone(&self) -> Self {
        Self { name: self.name.clone(), rules: PhantomData }
    }
}

impl<R> PartialEq for Identifier<R> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<R> Eq for Identifier<R> {}

impl<R> Hash for Identifier<R> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl<R> fmt::Debug for Identifier<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.name, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Short;

    impl IdentifierRules for Short {
        const MAX_LEN: usize = 12;
        const SERVER_MAX_LEN: usize = 16;
        const QUOTE: char = '`';
        const RESERVED_PREFIX: Option<&'static str> = Some("sys_");
    }

    type Name = Identifier<Short>;

    #[test]
    fn names_follow_the_plain_pattern_and_the_rules() {
        for good in ["a", "_", "Locks_2", "_x9", "nnnnnnnnnnnn", "sys"] {
            assert_eq!(Name::new("table", good).unwrap().quoted(), format!("`{good}`"));
        }
        for bad in ["", "9a", "x; DROP", "a`b", "a\"b", "a-b", "a b", "ü", "a.b", "a\0", "nnnnnnnnnnnnn", "SYS_x"] {
            let err = Name::new("table", bad).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad:?}: {err}");
        }
        let err = Name::new("schema", "a\"b").unwrap_err().to_string();
        assert!(err.contains("schema name \"a\\\"b\"") && err.contains("not starting with `sys_`"), "{err}");
    }

    #[test]
    fn derived_names_stay_within_the_server_limit_and_apart() {
        assert_eq!(Name::new("table", "locks").unwrap().derived("queue").as_str(), "locks_queue");
        let long = Name::new("table", "nnnnnnnnnnnn").unwrap();
        let other = Name::new("table", "nnnnnnnnnnnm").unwrap();
        let (a, b) = (long.derived("queue"), other.derived("queue"));
        assert!(a.as_str().len() <= 16 && a.as_str().ends_with("_queue"), "{a:?}");
        assert_ne!(a, b, "long names that differ only at the end stay apart");
        assert_eq!(a, long.derived("queue"), "stable");
    }
}
