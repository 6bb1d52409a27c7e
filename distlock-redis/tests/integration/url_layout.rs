//! The store's layout given by the URL alone reaches the server: the keys it writes,
//! fencing numbers, the release channel. A URL that contradicts the builder, or that
//! the store cannot read, connects to nothing.

use crate::common;

use std::time::Duration;

use common::{store_key, unique_prefix};
use distlock_api::{Acquire, LockError, LockStore, Token, Ttl};
use distlock_conformance::kit::redis_server::RedisServer;
use distlock_redis::RedisLockStore;

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(30)).unwrap()
}

#[tokio::test]
async fn prefix_fencing_and_notifications_from_the_url_shape_what_the_server_sees() {
    let Some(server) = RedisServer::start_or_skip("layout from the URL") else { return };
    let prefix = unique_prefix("url");
    let url = format!("{}/?prefix={prefix}&fencing=true&notifications=false", server.url());
    let store = RedisLockStore::connect(&url).await.unwrap();
    assert_eq!(store.key_prefix(), prefix);
    assert!(store.fencing() && store.capabilities().fencing);
    assert!(!store.capabilities().release_notifications);

    let (key, token) = (store_key("order:1"), Token::generate());
    let Acquire::Acquired { fence: Some(fence) } = store.try_acquire(&key, &token, ttl()).await.unwrap() else {
        panic!("no fence from a fencing store");
    };
    assert!(fence > 0);
    assert_eq!(
        server.keys("*"),
        [
            format!("{prefix}:fence"),
            format!("{prefix}:fence:lock:order:1"),
            format!("{prefix}:lock-settings"),
            format!("{prefix}:lock:order:1")
        ]
    );
    // The CLI's view of a lock held under an application's prefix: the same URL sees it.
    let viewer = RedisLockStore::connect(&url).await.unwrap();
    let holder = viewer.inspect(&key).await.unwrap().expect("held");
    assert_eq!((holder.token, holder.fence), (token.clone(), Some(fence)));
    // Another client of the prefix with other settings is refused.
    let other = format!("{}/?prefix={prefix}&fencing=false", server.url());
    assert!(matches!(RedisLockStore::connect(&other).await.unwrap_err(), LockError::Config { .. }));
    // The default prefix is another namespace.
    assert!(RedisLockStore::connect(&server.url()).await.unwrap().inspect(&key).await.unwrap().is_none());
    assert!(store.release(&key, &token).await.unwrap());
}

#[tokio::test]
async fn a_url_contradicting_the_builder_connects_to_nothing() {
    let Some(server) = RedisServer::start_or_skip("URL contradicting the builder") else { return };
    let url = format!("{}/?prefix=from-url", server.url());
    let err = RedisLockStore::builder().key_prefix("from-builder").connect(&url).await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");
    assert!(err.to_string().contains("from-url") && err.to_string().contains("from-builder"), "{err}");
    assert_eq!(server.command(&["CLIENT", "LIST"]).as_text().map(|list| list.lines().count()), Some(1), "only ours");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resp3_connection_keeps_every_promise_of_a_cycle() {
    let Some(server) = RedisServer::start_or_skip("protocol=resp3") else { return };
    for fencing in [false, true] {
        let prefix = unique_prefix("resp3");
        let url = format!("{}/?protocol=resp3&prefix={prefix}&fencing={fencing}&notifications=true", server.url());
        let store = RedisLockStore::connect(&url).await.unwrap();
        let (key, token, other) = (store_key("resp3"), Token::generate(), Token::generate());
        let acquired = store.try_acquire(&key, &token, ttl()).await.unwrap();
        assert!(acquired.is_acquired(), "{acquired:?}");
        assert!(matches!(store.try_acquire(&key, &other, ttl()).await.unwrap(), Acquire::Held { .. }));
        let holder = store.inspect(&key).await.unwrap().expect("held");
        assert_eq!(holder.token, token);
        assert_eq!(holder.fence.is_some(), fencing);
        assert!(store.extend(&key, &token, ttl()).await.unwrap());
        assert!(!store.extend(&key, &other, ttl()).await.unwrap());
        assert!(!store.release(&key, &other).await.unwrap());
        assert!(store.release(&key, &token).await.unwrap());
        assert!(store.inspect(&key).await.unwrap().is_none());
        // Notified waits on a free key return at once…
        tokio::time::timeout(Duration::from_secs(5), store.wait_for_release(&key, Duration::from_secs(60)))
            .await
            .expect("a free key ends the wait")
            .unwrap();
        // …and a published release wakes a waiter on a held one.
        let store = std::sync::Arc::new(store);
        assert!(store.try_acquire(&key, &token, ttl()).await.unwrap().is_acquired());
        let waiter = tokio::spawn({
            let (store, key) = (std::sync::Arc::clone(&store), key.clone());
            async move { store.wait_for_release(&key, Duration::from_secs(60)).await }
        });
        let channel = format!("{}:released", store.key_prefix());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while server.subscribers(&channel) != 1 {
            assert!(std::time::Instant::now() < deadline, "no subscriber on {channel}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(store.release(&key, &token).await.unwrap());
        tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken by the release").unwrap().unwrap();
    }
}
