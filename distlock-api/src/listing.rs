//! Listing held locks: key patterns, pages and cursors for [`LockStore::list`] and
//! [`GroupLockStore::list_groups`].
//!
//! [`LockStore::list`]: crate::LockStore::list
//! [`GroupLockStore::list_groups`]: crate::GroupLockStore::list_groups

use std::fmt;

use crate::error::{InvalidKey, LockError};
use crate::holder::{LockInfo, WaitingPlace};
use crate::key::LockKey;

/// A glob over application keys (without the `lock:` namespace), for
/// [`LockStore::list`](crate::LockStore::list).
///
/// `*` matches any run of characters (also none, also across `:`), `?` exactly one
/// character, and `\` makes the next character literal (`\*`, `\?`, `\\`). Every other
/// character, `[` and `]` included, matches itself. Stores translate the pattern to their
/// own matching (Redis `SCAN … MATCH`, SQL `LIKE`), escaping what is special there, so a
/// pattern means the same on every store.
///
/// ```
/// use distlock::KeyPattern;
///
/// let orders = KeyPattern::new("order:*")?;
/// assert!(orders.matches("order:42"));
/// assert!(!orders.matches("invoice:42"));
/// assert!(KeyPattern::new(r"50\%\*")?.matches("50%*"));
/// assert!(KeyPattern::all().matches("anything"));
/// # Ok::<(), distlock::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KeyPattern {
    text: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Part {
    Literal(char),
    One,
    Any,
}

impl KeyPattern {
    /// The pattern `*`: every key.
    pub fn all() -> Self {
        Self { text: "*".to_owned(), parts: vec![Part::Any] }
    }

    /// Parses a glob.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] when the pattern is empty, longer than
    /// [`LockKey::MAX_LEN`] bytes, contains a control character, or ends in a lone `\`.
    pub fn new(pattern: impl Into<String>) -> Result<Self, LockError> {
        let text = pattern.into();
        // A pattern obeys the rules of the keys it matches.
        LockKey::new(text.as_str())?;
        let mut parts = Vec::with_capacity(text.len());
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            parts.push(match c {
                '*' if parts.last() == Some(&Part::Any) => continue,
                '*' => Part::Any,
                '?' => Part::One,
                '\\' => match chars.next() {
                    Some(escaped) => Part::Literal(escaped),
                    None => return Err(LockError::InvalidKey { reason: InvalidKey::DanglingEscape }),
                },
                other => Part::Literal(other),
            });
        }
        Ok(Self { text, parts })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern matches every key.
    pub fn is_all(&self) -> bool {
        self.parts == [Part::Any]
    }

    /// Whether `key` (an application key, without the namespace) matches.
    pub fn matches(&self, key: &str) -> bool {
        let key: Vec<char> = key.chars().collect();
        // Classic glob matching with one backtracking point for the last `*`.
        let (mut p, mut k) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while k < key.len() {
            match self.parts.get(p) {
                Some(Part::Any) => {
                    star = Some((p, k));
                    p += 1;
                }
                Some(Part::One) => {
                    p += 1;
                    k += 1;
                }
                Some(Part::Literal(c)) if *c == key[k] => {
                    p += 1;
                    k += 1;
                }
                _ => match star {
                    Some((star_p, star_k)) => {
                        p = star_p + 1;
                        k = star_k + 1;
                        star = Some((star_p, star_k + 1));
                    }
                    None => return false,
                },
            }
        }
        self.parts[p..].iter().all(|part| *part == Part::Any)
    }

    /// The literal text every matching key starts with (up to the first wildcard); stores
    /// use it to narrow an index scan.
    pub fn literal_prefix(&self) -> String {
        self.parts
            .iter()
            .map_while(|part| match part {
                Part::Literal(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    /// The pattern as a Redis glob (for `SCAN … MATCH`), after `prefix` (the store's
    /// namespace, e.g. `app:lock:`), which is matched literally.
    ///
    /// The glob may match more than the pattern, never less: Redis's `?` matches one
    /// *byte*, so a `?` (one character, up to 4 bytes in UTF-8) becomes `?*`. Keep only
    /// the keys that [`matches`](Self::matches) accepts.
    pub fn to_redis_glob(&self, prefix: &str) -> String {
        let mut glob = String::with_capacity(prefix.len() + self.text.len() + 8);
        for c in prefix.chars() {
            push_redis_literal(&mut glob, c);
        }
        for part in &self.parts {
            match part {
                Part::Any => glob.push('*'),
                Part::One => glob.push_str("?*"),
                Part::Literal(c) => push_redis_literal(&mut glob, *c),
            }
        }
        glob
    }

    /// The pattern as an SQL `LIKE` pattern with `\` as its escape character (write
    /// `LIKE $1 ESCAPE '\'`), after `prefix`, which is matched literally.
    pub fn to_sql_like(&self, prefix: &str) -> String {
        let mut like = String::with_capacity(prefix.len() + self.text.len() + 8);
        for c in prefix.chars() {
            push_like_literal(&mut like, c);
        }
        for part in &self.parts {
            match part {
                Part::Any => like.push('%'),
                Part::One => like.push('_'),
                Part::Literal(c) => push_like_literal(&mut like, *c),
            }
        }
        like
    }
}

fn push_redis_literal(glob: &mut String, c: char) {
    if matches!(c, '*' | '?' | '[' | ']' | '\\' | '^' | '-') {
        glob.push('\\');
    }
    glob.push(c);
}

fn push_like_literal(like: &mut String, c: char) {
    if matches!(c, '%' | '_' | '\\') {
        like.push('\\');
    }
    like.push(c);
}

impl Default for KeyPattern {
    fn default() -> Self {
        Self::all()
    }
}

impl fmt::Display for KeyPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for KeyPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("KeyPattern").field(&self.text).finish()
    }
}

impl std::str::FromStr for KeyPattern {
    type Err = LockError;

    fn from_str(pattern: &str) -> Result<Self, LockError> {
        Self::new(pattern)
    }
}

/// Where a [`LockStore::list`](crate::LockStore::list) or
/// [`GroupLockStore::list_groups`](crate::GroupLockStore::list_groups) listing goes on:
/// opaque, valid only for the store, listing (and pattern) that returned it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ListCursor(String);

impl ListCursor {
    /// A cursor from a store's own position text (a Redis `SCAN` cursor, the last key of
    /// a page…). For store implementations.
    pub fn new(position: impl Into<String>) -> Self {
        Self(position.into())
    }

    /// The store's position text. For store implementations.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ListCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ListCursor").field(&self.0).finish()
    }
}

/// One held key, as listed by [`LockStore::list`](crate::LockStore::list), or one group
/// name, as listed by [`GroupLockStore::list_groups`](crate::GroupLockStore::list_groups).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldLock {
    /// The application's key (without the `lock:` namespace).
    pub key: LockKey,
    /// Who holds it: one holder for a single lock; for a group name its live holders
    /// (mode, owner, fence, time left), sorted by fence.
    pub holders: Vec<LockInfo>,
    /// For a group name, the live places of the groups waiting for it, oldest first.
    /// Empty in a [`LockStore::list`](crate::LockStore::list) page: a single lock's
    /// fair-queue places are read per key with
    /// [`QueueStore::queue_places`](crate::QueueStore::queue_places).
    pub waiting: Vec<WaitingPlace>,
}

impl HeldLock {
    /// Builds a `HeldLock` without waiting places (the struct is `#[non_exhaustive]`).
    pub fn new(key: LockKey, holders: Vec<LockInfo>) -> Self {
        Self { key, holders, waiting: Vec::new() }
    }

    /// Sets the waiting places (builder style).
    #[must_use]
    pub fn with_waiting(mut self, waiting: Vec<WaitingPlace>) -> Self {
        self.waiting = waiting;
        self
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ListPage {
    /// The held keys of this page that match the pattern, with unexpired leases (of a
    /// group listing: the names with a live holder or place).
    pub locks: Vec<HeldLock>,
    /// Where the listing goes on; `None` when it is complete.
    pub next: Option<ListCursor>,
}

impl ListPage {
    /// The most keys a store examines for one page: a larger `limit` given to
    /// [`LockStore::list`](crate::LockStore::list) counts as this, so that no page becomes
    /// one long operation on the server.
    pub const MAX_LIMIT: usize = 10_000;

    /// Builds a page (the struct is `#[non_exhaustive]`).
    pub fn new(locks: Vec<HeldLock>, next: Option<ListCursor>) -> Self {
        Self { locks, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> KeyPattern {
        KeyPattern::new(text).unwrap()
    }

    #[test]
    fn globs_match_like_redis_would() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("*", "order:1", true),
            ("order:*", "order:", true),
            ("order:*", "order:1:2", true),
            ("order:*", "orders:1", false),
            ("*:42", "order:42", true),
            ("*:42", "order:420", false),
            ("o?der", "order", true),
            ("o?der", "oder", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("a**b", "ab", true),
            (r"\*", "*", true),
            (r"\*", "x", false),
            ("[x]", "[x]", true),
            ("[x]", "x", false),
            ("é?", "éü", true),
        ];
        for (glob, key, expected) in cases {
            assert_eq!(pattern(glob).matches(key), *expected, "{glob} vs {key}");
        }
    }

    #[test]
    fn patterns_are_validated_before_use() {
        for bad in ["", "a\nb", "trailing\\"] {
            assert!(matches!(KeyPattern::new(bad), Err(LockError::InvalidKey { .. })), "{bad:?}");
        }
        assert!(KeyPattern::new("x".repeat(LockKey::MAX_LEN + 1)).is_err());
        assert!(pattern("*").is_all() && pattern("**").is_all() && !pattern("a*").is_all());
    }

    #[test]
    fn translations_escape_what_is_special_there() {
        let p = pattern(r"50%_[a]\*?x*");
        assert_eq!(p.literal_prefix(), "50%_[a]*");
        assert_eq!(p.to_redis_glob("app:lock:"), r"app:lock:50%_\[a\]\*?*x*");
        assert_eq!(p.to_sql_like("lock:"), r"lock:50\%\_[a]*_x%");
        assert_eq!(pattern("a-b^c").to_redis_glob(""), r"a\-b\^c");
    }
}
