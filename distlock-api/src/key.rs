//! Validated lock keys and the `lock:` namespace.

use std::fmt;

use crate::error::{InvalidKey, LockError};

/// The namespace the [`LockManager`](crate::LockManager) puts in front of every key
/// before a store sees it.
pub const LOCK_NAMESPACE: &str = "lock:";

/// A validated, application-level lock key such as `order:42`.
///
/// A key is 1 to [`LockKey::MAX_LEN`] bytes of UTF-8 without NUL or any other control
/// character. Keys are case-sensitive and compared byte for byte. The `lock:` namespace
/// is **not** part of a `LockKey`; see [`StoreKey`].
///
/// ```
/// use distlock::LockKey;
///
/// let key = LockKey::new("order:42")?;
/// assert_eq!(key.as_str(), "order:42");
/// assert!(LockKey::new("").is_err());
/// assert!(LockKey::new("bad\nkey").is_err());
/// # Ok::<(), distlock::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    /// `lock:` followed by the key, so that the [`StoreKey`] made from it is the same
    /// text: one allocation per key.
    namespaced: String,
}

impl LockKey {
    /// The longest key accepted, in bytes.
    pub const MAX_LEN: usize = 512;

    /// Validates `key`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] when the key is empty, longer than [`LockKey::MAX_LEN`]
    /// bytes, or contains a control character (including NUL).
    pub fn new(key: impl Into<String>) -> Result<Self, LockError> {
        let mut namespaced = key.into();
        validate(&namespaced)?;
        namespaced.insert_str(0, LOCK_NAMESPACE);
        Ok(Self { namespaced })
    }

    /// The key as the application wrote it (without the `lock:` namespace).
    pub fn as_str(&self) -> &str {
        &self.namespaced[LOCK_NAMESPACE.len()..]
    }

    /// The namespaced key a store receives: `lock:` followed by this key.
    pub fn to_store_key(&self) -> StoreKey {
        StoreKey(self.clone())
    }

    /// As [`to_store_key`](Self::to_store_key), without copying the key.
    pub fn into_store_key(self) -> StoreKey {
        StoreKey(self)
    }
}

fn validate(key: &str) -> Result<(), LockError> {
    let reason = if key.is_empty() {
        InvalidKey::Empty
    } else if key.len() > LockKey::MAX_LEN {
        InvalidKey::TooLong { len: key.len(), max: LockKey::MAX_LEN }
    } else if let Some(index) = control_character(key) {
        InvalidKey::ControlCharacter { index }
    } else {
        return Ok(());
    };
    Err(LockError::InvalidKey { reason })
}

/// The byte index of `key`'s first control character, if any. A key of printable ASCII
/// (most keys) is passed byte by byte, without decoding characters.
fn control_character(key: &str) -> Option<usize> {
    // No early exit: the compiler checks many bytes at a time.
    if key.bytes().fold(true, |printable, byte| printable & (byte.wrapping_sub(b' ') <= b'~' - b' ')) {
        return None;
    }
    key.char_indices().find(|(_, c)| c.is_control()).map(|(index, _)| index)
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockKey").field(&self.as_str()).finish()
    }
}

impl AsRef<str> for LockKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// As [`LockKey::new`], copying `key` once (`new` copies a `&str` into a `String` first).
impl TryFrom<&str> for LockKey {
    type Error = LockError;

    fn try_from(key: &str) -> Result<Self, LockError> {
        validate(key)?;
        let mut namespaced = String::with_capacity(LOCK_NAMESPACE.len() + key.len());
        namespaced.push_str(LOCK_NAMESPACE);
        namespaced.push_str(key);
        Ok(Self { namespaced })
    }
}

impl TryFrom<String> for LockKey {
    type Error = LockError;

    fn try_from(key: String) -> Result<Self, LockError> {
        Self::new(key)
    }
}

/// A namespaced key as a [`LockStore`](crate::LockStore) receives it: `lock:` + a
/// validated [`LockKey`].
///
/// Only a `LockKey` can make one ([`LockKey::to_store_key`]), so a store never sees an
/// un-namespaced or unvalidated key. A store may add its own prefix in front (the Redis
/// store writes `{key_prefix}:lock:{key}`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreKey(LockKey);

impl StoreKey {
    /// The full namespaced key, e.g. `lock:order:42`.
    pub fn as_str(&self) -> &str {
        &self.0.namespaced
    }

    /// The application's part of the key, e.g. `order:42`.
    pub fn lock_key(&self) -> &str {
        self.0.as_str()
    }

    /// The application's key this store key was made of.
    pub fn as_lock_key(&self) -> &LockKey {
        &self.0
    }
}

impl fmt::Display for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoreKey").field(&self.as_str()).finish()
    }
}

impl From<&LockKey> for StoreKey {
    fn from(key: &LockKey) -> Self {
        key.to_store_key()
    }
}

impl From<LockKey> for StoreKey {
    fn from(key: LockKey) -> Self {
        key.into_store_key()
    }
}

/// Checks a store's key prefix: at most `max_len` bytes and no control characters (the
/// empty prefix passes; a store that needs one checks that itself).
///
/// # Errors
///
/// [`LockError::Config`] saying what is wrong with the prefix ("the key prefix is 300
/// bytes long, …", "… contains a control character at byte 3").
pub fn check_key_prefix(prefix: &str, max_len: usize) -> Result<(), LockError> {
    let problem = if prefix.len() > max_len {
        format!("is {} bytes long, at most {max_len} are allowed", prefix.len())
    } else if let Some((index, _)) = prefix.char_indices().find(|(_, c)| c.is_control()) {
        format!("contains a control character at byte {index}")
    } else {
        return Ok(());
    };
    Err(LockError::Config { message: format!("the key prefix {problem}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_edges_and_non_ascii() {
        assert!(LockKey::new("a").is_ok());
        assert!(LockKey::new("x".repeat(LockKey::MAX_LEN)).is_ok());
        assert!(LockKey::new("订单:42 ünïcødé").is_ok());
        assert!(LockKey::new("quote' \" back\\slash").is_ok());
    }

    #[test]
    fn rejects_bad_keys_with_a_reason() {
        let err = LockKey::new("").unwrap_err();
        assert!(matches!(err, LockError::InvalidKey { reason: InvalidKey::Empty }), "{err}");
        let err = LockKey::new("x".repeat(LockKey::MAX_LEN + 1)).unwrap_err();
        assert!(matches!(err, LockError::InvalidKey { reason: InvalidKey::TooLong { len: 513, max: 512 } }), "{err}");
        for bad in ["a\0b", "a\nb", "tab\t", "\u{7f}", "\u{85}"] {
            let err = LockKey::new(bad).unwrap_err();
            assert!(
                matches!(err, LockError::InvalidKey { reason: InvalidKey::ControlCharacter { .. } }),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn store_key_is_namespaced() {
        let key = LockKey::new("order:1").unwrap();
        let store_key = key.to_store_key();
        assert_eq!(store_key.as_str(), "lock:order:1");
        assert_eq!(store_key.lock_key(), "order:1");
        assert_eq!(store_key.as_lock_key(), &key);
        assert_eq!(key.as_str(), "order:1");
        assert_eq!(format!("{key} {key:?} {store_key:?}"), r#"order:1 LockKey("order:1") StoreKey("lock:order:1")"#);
        assert_eq!(key.clone().into_store_key(), store_key);
        assert_eq!(LockKey::try_from("order:1").unwrap(), key);
        assert!(LockKey::try_from("bad\nkey").is_err());
    }

    #[test]
    fn key_prefixes_are_checked() {
        for good in ["", "distlock", "app:v2", "订单", &"p".repeat(256)] {
            assert!(check_key_prefix(good, 256).is_ok(), "{good:?}");
        }
        for bad in ["a\nb", "nul\0", "\u{7f}", &"p".repeat(257)] {
            let err = check_key_prefix(bad, 256).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad:?}: {err}");
            assert!(err.to_string().contains("key prefix"), "{err}");
        }
    }
}
