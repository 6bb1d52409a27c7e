//! Values attached to leases: what a holder publishes for others to read, such as a
//! leader's address.

use std::fmt::Debug;

use async_trait::async_trait;

use crate::error::{InvalidValue, LockError};
use crate::holder::LockInfo;
use crate::key::StoreKey;
use crate::token::Token;

/// A value a holder attaches to its lease ([`LeaseValueStore::set_value`]): UTF-8 text of
/// at most [`LeaseValue::MAX_LEN`] bytes without NUL, checked before any I/O.
///
/// ```
/// use distlock::LeaseValue;
///
/// let value = LeaseValue::new("10.0.0.7:8080").unwrap();
/// assert_eq!(value.as_str(), "10.0.0.7:8080");
/// assert!(LeaseValue::new("a\0b").is_err());
/// assert!(LeaseValue::new("x".repeat(LeaseValue::MAX_LEN + 1)).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LeaseValue(String);

impl LeaseValue {
    /// The longest value, in bytes.
    pub const MAX_LEN: usize = 1024;

    /// Checks `value`: at most [`MAX_LEN`](Self::MAX_LEN) bytes, no NUL character
    /// (PostgreSQL's `text` cannot hold one).
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidValue`] saying what is wrong.
    pub fn new(value: impl Into<String>) -> Result<Self, LockError> {
        let value = value.into();
        if value.len() > Self::MAX_LEN {
            return Err(LockError::InvalidValue {
                reason: InvalidValue::TooLong { len: value.len(), max: Self::MAX_LEN },
            });
        }
        if let Some(index) = value.bytes().position(|byte| byte == 0) {
            return Err(LockError::InvalidValue { reason: InvalidValue::Nul { index } });
        }
        Ok(Self(value))
    }

    /// The value's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value's text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Display for LeaseValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LeaseValue {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The holder of a key with the value its lease carries, as
/// [`LeaseValueStore::inspect_value`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ValuedHolder {
    /// The holder: token, fence, time left.
    pub holder: LockInfo,
    /// The value the holder attached to this lease, `None` when it attached none.
    pub value: Option<LeaseValue>,
}

impl ValuedHolder {
    /// Builds a `ValuedHolder` (the struct is `#[non_exhaustive]`).
    pub fn new(holder: LockInfo, value: Option<LeaseValue>) -> Self {
        Self { holder, value }
    }
}

/// Values attached to leases, reached through [`LockStore::values`](crate::LockStore::values):
/// what leader election publishes (the leader's identity or address) for every other
/// process to read.
///
/// # Contract
///
/// 1. **A value belongs to one lease.** Only the token holding an unexpired lease on the
///    key can attach a value to it; the value is seen only while that lease lasts. After a
///    release, an expiry or a hand-over to another token, the key's next holder has no
///    value until it sets one, and no reader ever sees a value with another holder.
/// 2. **One atomic step each.** [`set_value`](Self::set_value) checks the holder and writes
///    in one operation; [`inspect_value`](Self::inspect_value) reads holder and value in
///    one operation, so the pair it returns existed together.
/// 3. Renewing a lease ([`LockStore::extend`](crate::LockStore::extend)) keeps its value.
#[async_trait]
pub trait LeaseValueStore: Debug + Send + Sync {
    /// Attaches `value` to the lease `token` holds on `key`, replacing the value it had;
    /// returns whether it did (`false`: `token` does not hold an unexpired lease on `key`,
    /// and nothing was written).
    async fn set_value(&self, key: &StoreKey, token: &Token, value: &LeaseValue) -> Result<bool, LockError>;

    /// The current holder of `key` with its lease's value, or `None` when the key is free
    /// (or its lease expired).
    async fn inspect_value(&self, key: &StoreKey) -> Result<Option<ValuedHolder>, LockError>;
}
