//! A released lock's lease is kept for the store's next acquisition with the same TTL,
//! against the real etcd at `DISTLOCK_ETCD_URL`.

use std::time::Duration;

use distlock_api::{LockStore, QueuedAttempt, StoreKey, Token};
use distlock_etcd::etcd_client::GetOptions;
use distlock_etcd::EtcdLockStore;
use tokio::time::Instant;

use super::values::{key, ttl};

async fn store(test: &str) -> Option<EtcdLockStore> {
    let url = distlock_conformance::kit::etcd_url(test)?;
    let prefix = format!("leases-{test}-{}", Token::generate().short());
    Some(EtcdLockStore::builder().key_prefix(prefix).connect(&url).await.expect("connect"))
}

/// The lease holding `key`.
async fn lease_of(store: &EtcdLockStore, key: &StoreKey) -> i64 {
    let mut kv = store.client().kv_client();
    let answer = kv.get(store.etcd_key(key), None).await.unwrap();
    answer.kvs().first().map(|found| found.lease()).expect("the key is held")
}

/// The seconds `lease` has left, or `None` once it is revoked or expired.
async fn left(store: &EtcdLockStore, lease: i64) -> Option<i64> {
    let answer = store.client().lease_client().time_to_live(lease, None).await.unwrap();
    (answer.ttl() > 0).then_some(answer.ttl())
}

/// Acquires `key` with `secs` of TTL for a new token, and returns the token.
async fn take(store: &EtcdLockStore, key: &StoreKey, secs: u64) -> Token {
    let token = Token::generate();
    assert!(store.try_acquire(key, &token, ttl(secs)).await.unwrap().is_acquired());
    token
}

/// The next acquisition with the same TTL puts its key on the released lease, whose TTL
/// is then reset; one with another TTL gets a lease of its own.
#[tokio::test]
async fn a_released_lease_holds_the_next_key_of_its_ttl() {
    let Some(store) = store("reuse").await else { return };
    let (first, second, third) = (key("first"), key("second"), key("third"));
    let token = take(&store, &first, 30).await;
    let lease = lease_of(&store, &first).await;
    assert!(store.release(&first, &token).await.unwrap());
    assert!(left(&store, lease).await.is_some(), "the released lease was revoked");

    let token = take(&store, &second, 30).await;
    assert_eq!(lease_of(&store, &second).await, lease, "the next acquisition did not use the released lease");
    let seconds = left(&store, lease).await.expect("the lease is alive");
    assert!(seconds >= 29, "the lease's TTL was not reset: {seconds} s left of 30");

    let other = take(&store, &third, 20).await;
    assert_ne!(lease_of(&store, &third).await, lease, "a lease of another TTL held the key");
    assert!(store.release(&second, &token).await.unwrap());
    assert!(store.release(&third, &other).await.unwrap());
}

/// A lease with less than half of its TTL left when its key is released is revoked, and
/// the next acquisition gets a new one.
#[tokio::test]
async fn a_lease_past_half_its_ttl_is_revoked_on_release() {
    let Some(store) = store("stale").await else { return };
    let (first, second) = (key("first"), key("second"));
    let token = take(&store, &first, 2).await;
    let lease = lease_of(&store, &first).await;
    // Half of the 2 s TTL passes (the lease is the TTL's, or longer if etcd grants more).
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(store.release(&first, &token).await.unwrap());
    let next = take(&store, &second, 2).await;
    assert_ne!(lease_of(&store, &second).await, lease, "a lease past half its TTL held the next key");
    // Gone: revoked in the background (or, at the latest, ended with its TTL).
    let deadline = Instant::now() + Duration::from_secs(10);
    while left(&store, lease).await.is_some() {
        assert!(Instant::now() < deadline, "the stale lease outlived its TTL");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(store.release(&second, &next).await.unwrap());
}

/// The lease of `token`'s place in the queue of `key` (the place whose value, when it was
/// taken and the token, ends in the token).
async fn place_lease(store: &EtcdLockStore, key: &StoreKey, token: &Token) -> i64 {
    let queue = format!("{}/queue/{}\u{1f}", store.key_prefix(), key.as_str());
    let answer = store.client().kv_client().get(queue, Some(GetOptions::new().with_prefix())).await.unwrap();
    let own = format!(" {}", token.as_str());
    let place = answer.kvs().iter().find(|found| found.value().ends_with(own.as_bytes()));
    place.map(|found| found.lease()).expect("the waiter has a place")
}

/// A queued attempt of `token` on `key`, with places of `place_secs`.
async fn queued(store: &EtcdLockStore, key: &StoreKey, token: &Token, place_secs: u64) -> bool {
    let attempt = QueuedAttempt { key, token, ttl: ttl(30), place: ttl(place_secs) };
    store.queue().unwrap().try_acquire_queued(attempt).await.unwrap().is_acquired()
}

/// A waiter queues on `key` (held meanwhile), with a place of 10 s, then takes it; returns
/// its token and its place's lease.
async fn serve_a_waiter(store: &EtcdLockStore, key: &StoreKey) -> (Token, i64) {
    let holder = take(store, key, 30).await;
    let first = Token::generate();
    assert!(!queued(store, key, &first, 10).await, "the key is held");
    let lease = place_lease(store, key, &first).await;
    assert!(store.release(key, &holder).await.unwrap());
    assert!(queued(store, key, &first, 10).await, "the first in line took the key");
    (first, lease)
}

/// A waiter that takes the key leaves its place's lease to the store's next place with
/// the same TTL (kept alive beside the put, no new lease); with another TTL, a new lease.
#[tokio::test]
async fn a_served_places_lease_holds_the_next_place() {
    let Some(store) = store("place").await else { return };
    let hot = key("hot");
    let (first, lease) = serve_a_waiter(&store, &hot).await;
    assert!(left(&store, lease).await.is_some(), "the served place's lease was revoked");

    let second = Token::generate();
    assert!(!queued(&store, &hot, &second, 10).await, "the key is held");
    assert_eq!(place_lease(&store, &hot, &second).await, lease, "the next place did not use the kept lease");
    let seconds = left(&store, lease).await.expect("the lease is alive");
    assert!(seconds >= 9, "the lease's TTL was not reset: {seconds} s left of 10");
    let third = Token::generate();
    assert!(!queued(&store, &hot, &third, 20).await, "the key is held");
    assert_ne!(place_lease(&store, &hot, &third).await, lease, "a lease of another TTL held the place");
    // A release with a waiter's token takes its place away.
    for token in [&third, &second] {
        assert!(!store.release(&hot, token).await.unwrap());
    }
    assert!(store.release(&hot, &first).await.unwrap());
}

/// A kept place lease that ended on the server (revoked here by hand) is not used: the
/// next waiter gets a new lease and its place, in the queue as usual.
#[tokio::test]
async fn a_kept_place_lease_that_ended_is_replaced() {
    let Some(store) = store("ended").await else { return };
    let hot = key("hot");
    let (first, lease) = serve_a_waiter(&store, &hot).await;
    store.client().lease_client().revoke(lease).await.unwrap();

    let second = Token::generate();
    assert!(!queued(&store, &hot, &second, 10).await, "the key is held");
    let new = place_lease(&store, &hot, &second).await;
    assert_ne!(new, lease, "the place was put on an ended lease");
    assert!(left(&store, new).await.is_some(), "the new place's lease is alive");
    assert!(store.release(&hot, &first).await.unwrap());
    assert!(queued(&store, &hot, &second, 10).await, "the waiter with the new place took the key");
    assert!(store.release(&hot, &second).await.unwrap());
}
