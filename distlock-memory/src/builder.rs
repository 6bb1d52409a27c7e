//! Making a [`MemoryLockStore`] or a [`MemoryIdempotencyStore`] the way every store of
//! the family is made: `connect(url)` and `builder()` … `build()` / `connect(url)`, with
//! the `memory://` URL checked here.

use distlock_api::LockError;

use crate::idempotency::MemoryIdempotencyStore;
use crate::store::MemoryLockStore;

/// Builds a [`MemoryLockStore`]: [`MemoryLockStore::builder`].
///
/// The memory store has no settings (no server, no layout, no timeouts), so the builder
/// has no knobs; it is here so that code that makes its stores with `builder()` …
/// `build()` or `connect(url)` makes this one the same way.
///
/// ```
/// use distlock::memory::MemoryLockStore;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
/// let store = MemoryLockStore::builder().build();
/// let same_kind = MemoryLockStore::builder().connect("memory://").await?;
/// # let _ = (store, same_kind); Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `build` or `connect` is called"]
pub struct MemoryLockStoreBuilder {
    _private: (),
}

impl MemoryLockStoreBuilder {
    /// A builder with the defaults (the only settings there are).
    pub fn new() -> Self {
        Self::default()
    }

    /// A new, empty store.
    pub fn build(self) -> MemoryLockStore {
        MemoryLockStore::new()
    }

    /// A new, empty store, after checking that `url` is a memory URL: `memory://` or
    /// `memory:///` (the scheme in any case). Nothing else may follow: the store lives in
    /// this process, so a host, a path or a parameter would be silently ignored.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for any other URL; the message repeats no part of it after
    /// the scheme.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it does no I/O.
    pub async fn connect(self, url: &str) -> Result<MemoryLockStore, LockError> {
        check_url(url)?;
        Ok(self.build())
    }
}

impl MemoryLockStore {
    /// A new, empty store for `url`, which must be `memory://` (see
    /// [`MemoryLockStoreBuilder::connect`]). Every call returns a store of its own.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
    /// let store = distlock::memory::MemoryLockStore::connect("memory://").await?;
    /// assert_eq!(distlock::LockStore::backend(&store), "memory");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for any URL but `memory://`, before anything is made.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it does no I/O.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        MemoryLockStoreBuilder::new().connect(url).await
    }

    /// A builder, for code that makes every store the same way; see
    /// [`MemoryLockStoreBuilder`].
    pub fn builder() -> MemoryLockStoreBuilder {
        MemoryLockStoreBuilder::new()
    }
}

impl MemoryIdempotencyStore {
    /// A new, empty store for `url`, which must be `memory://`, as for
    /// [`MemoryLockStore::connect`].
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for any URL but `memory://`, before anything is made.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it does no I/O.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        check_url(url)?;
        Ok(Self::new())
    }
}

/// `memory://` or `memory:///`, the scheme in any case: anything after it would be ignored.
fn check_url(url: &str) -> Result<(), LockError> {
    const SCHEME: &str = "memory://";
    let scheme_matches = url.get(..SCHEME.len()).is_some_and(|scheme| scheme.eq_ignore_ascii_case(SCHEME));
    let message = match url.get(SCHEME.len()..) {
        Some("" | "/") if scheme_matches => return Ok(()),
        _ if scheme_matches => {
            "`memory://` URLs take no host, path or parameters: the memory store lives in this process"
        }
        _ => "not a memory store URL: expected `memory://`",
    };
    Err(LockError::Config { message: message.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_urls_are_checked() {
        for url in ["memory://", "MEMORY://", "Memory:///"] {
            assert!(check_url(url).is_ok(), "{url}");
        }
        for url in
            ["", "memory:", "memory:/", "memory://x", "memory://?prefix=a", "memory:///db", "redis://h", "mémoire"]
        {
            let err = check_url(url).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{url}: {err}");
        }
    }

    #[test]
    fn errors_never_repeat_the_url() {
        for url in ["memory://user:secret@host", "redis://:secret@h", "secret"] {
            let err = check_url(url).unwrap_err();
            assert!(!err.to_string().contains("secret"), "{url}: {err}");
        }
    }

    #[tokio::test]
    async fn every_way_of_making_a_store_makes_an_empty_one_of_its_own() {
        let made = [
            MemoryLockStore::connect("memory://").await.unwrap(),
            MemoryLockStore::builder().connect("memory:///").await.unwrap(),
            MemoryLockStore::builder().build(),
        ];
        assert!(made.iter().all(|store| store.stored_leases() == 0));
        assert!(MemoryLockStore::connect("memory://x").await.is_err());
        assert!(MemoryIdempotencyStore::connect("memory://").await.is_ok());
        assert!(matches!(MemoryIdempotencyStore::connect("memory://x").await, Err(LockError::Config { .. })));
    }
}
