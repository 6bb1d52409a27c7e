//! The key of one idempotent operation in a store.

use std::fmt;

use crate::{LockError, LockKey};

/// The key an idempotency record is stored under: the client's idempotency key combined
/// with whatever scopes it (the caller's identity, the method and route — the
/// layer of `distlock-idempotency` builds it that way), so that one caller can never read another's
/// responses.
///
/// The rules are those of lock keys ([`LockKey`]): 1–512 bytes of UTF-8 without NUL or
/// other control characters, case-sensitive. A bad key is [`LockError::InvalidKey`],
/// before any I/O.
///
/// ```
/// use distlock::idempotency::IdempotencyKey;
///
/// let key = IdempotencyKey::new("user:7:POST:/orders:8e03978e-40d5-43e8-bc93-6894a57f9324")?;
/// assert!(key.as_str().ends_with("9324"));
/// assert!(IdempotencyKey::new("").is_err());
/// # Ok::<(), distlock::LockError>(())
/// ```
///
/// `Debug` and `Display` show the key: keep it out of logs where keys are sensitive (the
/// library itself never logs it).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(LockKey);

impl IdempotencyKey {
    /// Validates `key`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] when it is empty, longer than 512 bytes or contains a
    /// control character.
    pub fn new(key: impl Into<String>) -> Result<Self, LockError> {
        LockKey::new(key).map(Self)
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({:?})", self.as_str())
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<&str> for IdempotencyKey {
    type Error = LockError;

    fn try_from(key: &str) -> Result<Self, LockError> {
        Self::new(key)
    }
}
