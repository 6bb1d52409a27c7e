use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockOptions, Token, Ttl};

use super::{manager, Keys, LONG_TTL};

/// Acquire → a second acquire fails → release → acquire again.
pub async fn acquire_conflict_release_reacquire(store: Arc<DynLockStore>) {
    let keys = Keys::new("acquire");
    let locks = manager(&store);
    let key = keys.key("a");
    let first = locks.try_lock(&key, LONG_TTL).await.unwrap().expect("a free key is acquired");
    assert_eq!(first.key().as_str(), key);
    assert_eq!(first.token().as_str().len(), Token::LEN);
    assert!(locks.try_lock(&key, LONG_TTL).await.unwrap().is_none(), "held key acquired twice");
    assert!(first.release().await.unwrap(), "the holder's release frees the key");
    let again = locks.try_lock(&key, LONG_TTL).await.unwrap().expect("a released key is free");
    assert!(again.release().await.unwrap());
}

/// The same process (and manager) cannot take a lock it already holds.
pub async fn not_reentrant(store: Arc<DynLockStore>) {
    let keys = Keys::new("reentrant");
    let locks = manager(&store);
    let key = keys.key("a");
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    let err = locks.lock_opts(&key, LONG_TTL, &LockOptions::new().wait(Duration::ZERO)).await.unwrap_err();
    assert!(err.is_not_acquired(), "{err}");
    let other_manager = manager(&store);
    assert!(other_manager.try_lock(&key, LONG_TTL).await.unwrap().is_none());
    assert!(held.release().await.unwrap());
}

/// Holding one key does not block another.
pub async fn distinct_keys_are_independent(store: Arc<DynLockStore>) {
    let keys = Keys::new("distinct");
    let locks = manager(&store);
    let a = locks.lock(&keys.key("a"), LONG_TTL).await.unwrap();
    let b = locks.lock(&keys.key("b"), LONG_TTL).await.unwrap();
    let prefix = locks.lock(&keys.key("a:b"), LONG_TTL).await.unwrap();
    assert!(a.release().await.unwrap());
    assert!(locks.try_lock(&keys.key("b"), LONG_TTL).await.unwrap().is_none());
    assert!(b.release().await.unwrap());
    assert!(prefix.release().await.unwrap());
}

/// `Order` and `order` are different keys.
pub async fn keys_are_case_sensitive(store: Arc<DynLockStore>) {
    let keys = Keys::new("case");
    let locks = manager(&store);
    let upper = locks.lock(&keys.key("Order"), LONG_TTL).await.unwrap();
    let lower = locks.lock(&keys.key("order"), LONG_TTL).await.unwrap();
    assert!(upper.release().await.unwrap());
    assert!(lower.release().await.unwrap());
}

/// Non-ASCII keys and keys with quotes, backslashes, spaces and glob characters are
/// stored and matched verbatim.
pub async fn odd_keys_round_trip(store: Arc<DynLockStore>) {
    let keys = Keys::new("odd");
    let locks = manager(&store);
    for name in ["订单:42", "ünïcødé ✓", "quote'd \"double\"", "back\\slash", "glob*?[x]", "%_like", "emoji 🔒"]
    {
        let key = keys.key(name);
        let lock = locks.lock(&key, LONG_TTL).await.unwrap();
        let info = store.inspect(lock.store_key()).await.unwrap().expect("held key is visible");
        assert_eq!(&info.token, lock.token(), "{name}");
        assert!(locks.try_lock(&key, LONG_TTL).await.unwrap().is_none(), "{name}");
        assert!(lock.release().await.unwrap(), "{name}");
    }
}

/// A release with a token that does not hold the key returns `false` and leaves the
/// holder intact.
pub async fn foreign_token_cannot_release(store: Arc<DynLockStore>) {
    let keys = Keys::new("foreign-release");
    let locks = manager(&store);
    let held = locks.lock(&keys.key("a"), LONG_TTL).await.unwrap();
    assert!(!store.release(held.store_key(), &Token::generate()).await.unwrap(), "foreign token released");
    let info = store.inspect(held.store_key()).await.unwrap().expect("holder intact");
    assert_eq!(&info.token, held.token());
    assert!(!store.release(&keys.store_key("never-held"), &Token::generate()).await.unwrap());
    assert!(held.release().await.unwrap());
}

/// An extend with a token that does not hold the key returns `false` and changes nothing.
pub async fn foreign_token_cannot_extend(store: Arc<DynLockStore>) {
    let keys = Keys::new("foreign-extend");
    let locks = manager(&store);
    let ttl = Duration::from_secs(20);
    let held = locks.lock(&keys.key("a"), ttl).await.unwrap();
    let foreign = Token::generate();
    assert!(!store.extend(held.store_key(), &foreign, Ttl::new(Duration::from_secs(300)).unwrap()).await.unwrap());
    let info = store.inspect(held.store_key()).await.unwrap().expect("holder intact");
    assert_eq!(&info.token, held.token());
    assert!(info.ttl_left <= ttl, "a foreign extend lengthened the lease to {:?}", info.ttl_left);
    assert!(!store.extend(&keys.store_key("never-held"), &foreign, Ttl::new(ttl).unwrap()).await.unwrap());
    assert!(store.inspect(&keys.store_key("never-held")).await.unwrap().is_none(), "extend created a lease");
    assert!(held.release().await.unwrap());
}

/// Releasing twice: the second release returns `false`.
pub async fn second_release_returns_false(store: Arc<DynLockStore>) {
    let keys = Keys::new("second-release");
    let locks = manager(&store);
    let held = locks.lock(&keys.key("a"), LONG_TTL).await.unwrap();
    let (key, token) = (held.store_key().clone(), held.token().clone());
    assert!(held.release().await.unwrap());
    assert!(!store.release(&key, &token).await.unwrap(), "a second release reported success");
}
