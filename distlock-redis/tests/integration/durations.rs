//! Every duration the store accepts, at its extremes: `Duration::ZERO` timeouts are
//! configuration errors naming the setting; `Duration::MAX` timeouts are cut to
//! `MAX_TIMEOUT` and give a store that works, release listener included (it used to
//! panic on every wait: "overflow when adding duration to instant"); waits of zero and
//! of `Duration::MAX` neither panic nor spin.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{store_key, unique_prefix};
use distlock_api::{LockError, LockStore, Token, Ttl};
use distlock_conformance::kit::redis_server::RedisServer;
use distlock_redis::redis::aio::ConnectionManager;
use distlock_redis::{RedisLockStore, RedisLockStoreBuilder};
use tokio::time::Instant;

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(30)).unwrap()
}

/// Until `PUBSUB NUMSUB channel` is 1: the store's subscriber is subscribed.
async fn until_subscribed(server: &RedisServer, channel: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.subscribers(channel) != 1 {
        assert!(Instant::now() < deadline, "no subscriber on {channel}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A held key, a waiter with a long `max`, a release: the waiter is woken by the
/// published release, long before its `max`.
async fn a_release_wakes_a_waiter(server: &RedisServer, store: RedisLockStore, max: Duration) {
    let store = Arc::new(store);
    let (key, holder) = (store_key("durations:wake"), Token::generate());
    assert!(store.try_acquire(&key, &holder, ttl()).await.unwrap().is_acquired());
    let waiter = tokio::spawn({
        let (store, key) = (Arc::clone(&store), key.clone());
        async move { store.wait_for_release(&key, max).await }
    });
    until_subscribed(server, &format!("{}:released", store.key_prefix())).await;
    assert!(store.release(&key, &holder).await.unwrap());
    let woken = tokio::time::timeout(Duration::from_secs(10), waiter).await;
    woken.expect("the release woke the waiter").expect("the waiter did not panic").unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn duration_max_timeouts_give_a_working_store_with_working_notifications() {
    let Some(server) = RedisServer::start_or_skip("Duration::MAX timeouts") else { return };
    for builder in [
        RedisLockStoreBuilder::new().release_notifications(true).connect_timeout(Duration::MAX),
        RedisLockStoreBuilder::new().release_notifications(true).response_timeout(Duration::MAX),
        RedisLockStoreBuilder::new()
            .release_notifications(true)
            .connect_timeout(Duration::MAX)
            .response_timeout(Duration::MAX)
            .reconnect_retries(usize::MAX),
    ] {
        let config = builder.connection_manager_config();
        assert!(config.connection_timeout() <= Some(RedisLockStoreBuilder::MAX_TIMEOUT), "{config:?}");
        assert!(config.response_timeout() <= Some(RedisLockStoreBuilder::MAX_TIMEOUT), "{config:?}");
        let store = builder.key_prefix(unique_prefix("max_timeouts")).connect(&server.url()).await.unwrap();
        assert!(store.capabilities().release_notifications);
        a_release_wakes_a_waiter(&server, store, Duration::from_secs(60)).await;
    }
}

#[tokio::test]
async fn zero_timeouts_are_config_errors_naming_the_setting_from_connect_and_build() {
    let Some(server) = RedisServer::start_or_skip("zero timeouts") else { return };
    for (builder, setting) in [
        (RedisLockStoreBuilder::new().connect_timeout(Duration::ZERO), "`connect_timeout`"),
        (RedisLockStoreBuilder::new().response_timeout(Duration::ZERO), "`response_timeout`"),
    ] {
        let err = builder.clone().connect(&server.url()).await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains(setting), "{err}");

        let client = distlock_redis::redis::Client::open(server.url()).unwrap();
        let conn = ConnectionManager::new(client.clone()).await.unwrap();
        let err = builder.clone().build(conn.clone()).unwrap_err();
        assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains(setting), "{err}");
        let err = builder.notification_client(client).build(conn).unwrap_err();
        assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains(setting), "{err}");
    }
    // Zero reconnection retries is a policy ("fail at once"), not an error.
    let store = RedisLockStoreBuilder::new().reconnect_retries(0).connect(&server.url()).await.unwrap();
    let (key, token) = (store_key("durations:retries"), Token::generate());
    assert!(store.try_acquire(&key, &token, ttl()).await.unwrap().is_acquired());
    assert!(store.release(&key, &token).await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn waits_of_zero_and_of_duration_max() {
    let Some(server) = RedisServer::start_or_skip("extreme waits") else { return };
    let notified = RedisLockStoreBuilder::new()
        .key_prefix(unique_prefix("waits"))
        .release_notifications(true)
        .connect(&server.url())
        .await
        .unwrap();
    let polling = RedisLockStoreBuilder::new().key_prefix(unique_prefix("waits")).connect(&server.url()).await.unwrap();
    let (key, holder) = (store_key("durations:wait"), Token::generate());
    for store in [&notified, &polling] {
        assert!(store.try_acquire(&key, &holder, ttl()).await.unwrap().is_acquired());
    }

    // Zero: back at once, on a held key, both kinds of store.
    for store in [&notified, &polling] {
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), store.wait_for_release(&key, Duration::ZERO))
            .await
            .expect("a zero wait returns")
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }

    // MAX without notifications: a plain (long) sleep, not a panic.
    let sleeping =
        tokio::time::timeout(Duration::from_millis(300), polling.wait_for_release(&key, Duration::MAX)).await;
    assert!(sleeping.is_err(), "a wait of Duration::MAX on a held key returned: {sleeping:?}");

    // MAX with notifications: woken by the release.
    a_release_wakes_a_waiter(&server, notified, Duration::MAX).await;
}
