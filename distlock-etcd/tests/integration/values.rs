//! Lease values on etcd beyond the shared suite: the value key's place and lifetime (its
//! lease is the lock key's), against the real etcd at `DISTLOCK_ETCD_URL`.

use std::time::Duration;

use distlock_api::{
    KeyPattern, LeaseValue, LeaseValueStore, LockKey, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, Ttl,
};
use distlock_etcd::etcd_client::PutOptions;
use distlock_etcd::EtcdLockStore;

async fn store(test: &str) -> Option<EtcdLockStore> {
    let url = distlock_conformance::kit::etcd_url(test)?;
    let prefix = format!("values-{test}-{}", Token::generate().short());
    Some(EtcdLockStore::builder().key_prefix(prefix).connect(&url).await.expect("connect"))
}

pub(crate) fn key(name: &str) -> StoreKey {
    LockKey::new(name).expect("valid key").to_store_key()
}

pub(crate) fn ttl(secs: u64) -> Ttl {
    Ttl::new(Duration::from_secs(secs)).expect("valid TTL")
}

fn value(text: &str) -> LeaseValue {
    LeaseValue::new(text).expect("valid value")
}

/// The lease of an etcd key, or `None` when the key does not exist.
async fn lease_of(store: &EtcdLockStore, etcd_key: &str) -> Option<i64> {
    let mut kv = store.client().kv_client();
    kv.get(etcd_key, None).await.unwrap().kvs().first().map(|found| found.lease())
}

/// The value key is on the lock key's lease: revoking that lease takes both.
#[tokio::test]
async fn a_revoked_lease_takes_its_value() {
    let Some(store) = store("revoke").await else { return };
    let key = key("leader");
    let token = Token::generate();
    assert!(store.try_acquire(&key, &token, ttl(30)).await.unwrap().is_acquired());
    assert!(store.set_value(&key, &token, &value("10.0.0.7:8080")).await.unwrap());
    let lease = lease_of(&store, &store.etcd_key(&key)).await.expect("held");
    assert_eq!(lease_of(&store, &store.value_key(&key)).await, Some(lease), "the value is on another lease");

    store.client().lease_client().revoke(lease).await.unwrap();
    assert_eq!(lease_of(&store, &store.value_key(&key)).await, None, "the value outlived its lease");
    assert!(store.inspect_value(&key).await.unwrap().is_none());
    assert!(!store.set_value(&key, &token, &value("late")).await.unwrap());
}

/// A release deletes the value key in its transaction; a listing never shows one.
#[tokio::test]
async fn value_keys_are_not_locks() {
    let Some(store) = store("listing").await else { return };
    let key = key("leader");
    let token = Token::generate();
    assert!(store.try_acquire(&key, &token, ttl(30)).await.unwrap().is_acquired());
    assert!(store.set_value(&key, &token, &value("a")).await.unwrap());
    let page = store.list(&KeyPattern::all(), None, 100).await.unwrap();
    let listed: Vec<&str> = page.locks.iter().map(|lock| lock.key.as_str()).collect();
    assert_eq!(listed, ["leader"]);

    assert!(store.release(&key, &token).await.unwrap());
    assert_eq!(lease_of(&store, &store.value_key(&key)).await, None, "a release left the value behind");
    assert!(store.list(&KeyPattern::all(), None, 100).await.unwrap().locks.is_empty());
}

/// An extension with another TTL moves the lock key to a new lease, and the value with it.
#[tokio::test]
async fn an_extension_to_another_ttl_keeps_the_value() {
    let Some(store) = store("extend").await else { return };
    let key = key("leader");
    let token = Token::generate();
    assert!(store.try_acquire(&key, &token, ttl(30)).await.unwrap().is_acquired());
    assert!(store.set_value(&key, &token, &value("kept")).await.unwrap());
    let before = lease_of(&store, &store.etcd_key(&key)).await.expect("held");
    assert!(store.extend(&key, &token, ttl(60)).await.unwrap());
    let after = lease_of(&store, &store.etcd_key(&key)).await.expect("held");
    assert_ne!(before, after, "another TTL kept the lease");
    assert_eq!(lease_of(&store, &store.value_key(&key)).await, Some(after), "the value stayed on the old lease");
    let seen = store.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!(seen.holder.token, token);
    assert_eq!(seen.value, Some(value("kept")));
    assert!(seen.holder.ttl_left > Duration::from_secs(30));

    // Without a value, an extension to another TTL creates none.
    let other = self::key("plain");
    assert!(store.try_acquire(&other, &token, ttl(30)).await.unwrap().is_acquired());
    assert!(store.extend(&other, &token, ttl(60)).await.unwrap());
    assert_eq!(lease_of(&store, &store.value_key(&other)).await, None);
    let seen = store.inspect_value(&other).await.unwrap().expect("held");
    assert_eq!(seen.value, None);
}

/// A value key that does not belong to the holder — left on another lease, or naming
/// another token on the holder's lease — is never shown with the holder.
#[tokio::test]
async fn a_foreign_value_key_is_not_the_holders() {
    let Some(store) = store("foreign").await else { return };
    let key = key("leader");
    let token = Token::generate();
    assert!(store.try_acquire(&key, &token, ttl(30)).await.unwrap().is_acquired());
    let lease = lease_of(&store, &store.etcd_key(&key)).await.expect("held");
    let mut kv = store.client().kv_client();

    let earlier = Token::generate();
    let stale = format!("{}\nold", earlier.as_str());
    kv.put(store.value_key(&key), stale.as_str(), None).await.unwrap();
    let seen = store.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!((seen.holder.token, seen.value), (token.clone(), None), "a value on no lease was shown");

    kv.put(store.value_key(&key), stale.as_str(), Some(PutOptions::new().with_lease(lease))).await.unwrap();
    let seen = store.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!(seen.value, None, "another token's value was shown");

    assert!(store.set_value(&key, &token, &value("mine")).await.unwrap());
    assert_eq!(store.inspect_value(&key).await.unwrap().expect("held").value, Some(value("mine")));
}

/// A hand-over in the fair queue starts the next holder without a value, and a queued
/// waiter (not the holder) cannot set one.
#[tokio::test]
async fn a_queued_hand_over_has_no_value() {
    let Some(store) = store("queue").await else { return };
    let key = key("leader");
    let (first, second) = (Token::generate(), Token::generate());
    assert!(store.try_acquire(&key, &first, ttl(30)).await.unwrap().is_acquired());
    assert!(store.set_value(&key, &first, &value("first")).await.unwrap());
    let attempt = QueuedAttempt { key: &key, token: &second, ttl: ttl(30), place: ttl(30) };
    assert!(!store.try_acquire_queued(attempt).await.unwrap().is_acquired());
    assert!(!store.set_value(&key, &second, &value("waiter")).await.unwrap());
    assert_eq!(store.queue_len(&key).await.unwrap(), 1, "the value key counts as a waiter");

    assert!(store.release(&key, &first).await.unwrap());
    let attempt = QueuedAttempt { key: &key, token: &second, ttl: ttl(30), place: ttl(30) };
    assert!(store.try_acquire_queued(attempt).await.unwrap().is_acquired());
    let seen = store.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!((seen.holder.token, seen.value), (second.clone(), None));
    assert!(store.release(&key, &second).await.unwrap());
}
