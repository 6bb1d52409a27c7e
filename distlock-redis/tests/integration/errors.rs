//! Store errors name the key as the application knows it (`order:42`), never the Redis
//! key with the store's prefix, whatever the operation and whatever went wrong.

use crate::common;

use std::time::Duration;

use common::{lock_key, store_key};
use distlock_api::{LockError, LockStore, Token, Ttl};
use distlock_conformance::kit::redis_server::RedisServer;
use distlock_redis::RedisLockStore;

/// A prefix that itself looks like a lock key, so no stripping of the Redis key could
/// recover the application's key by luck.
const PREFIX: &str = "app:lock:order";

fn assert_names_the_key<T: std::fmt::Debug>(result: Result<T, LockError>, operation: &str, key: &str) {
    match result {
        Err(ref err @ LockError::Store { backend: "redis", operation: op, key: Some(ref named), .. })
            if op == operation && named == key =>
        {
            let message = err.report().to_string();
            assert!(message.contains(&format!("failed to {operation} lock `{key}`: ")), "{message}");
            assert!(!message.contains(PREFIX), "{message}");
        }
        other => panic!("expected a redis store error from {operation} naming `{key}`, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_operation_names_the_application_key() {
    let Some(mut server) = RedisServer::start_or_skip("errors name the key") else { return };
    let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
    for fencing in [false, true] {
        let store = RedisLockStore::builder()
            .key_prefix(PREFIX)
            .fencing(fencing)
            .response_timeout(Duration::from_secs(1))
            .connect_timeout(Duration::from_secs(1))
            .reconnect_retries(0)
            .connect(&server.url())
            .await
            .unwrap();
        let (key, token) = (store_key("lock:order:42"), Token::generate());

        // Values this store did not write: the server answers, the store refuses.
        server.command(&["SET", &lock_key(&store, &key), "hello", "PX", "30000"]);
        assert_names_the_key(store.inspect(&key).await, "inspect", "lock:order:42");
        server.command(&["DEL", &lock_key(&store, &key)]);
        server.command(&["LPUSH", &lock_key(&store, &key), "x"]);
        assert_names_the_key(store.release(&key, &token).await, "release", "lock:order:42");
        assert_names_the_key(store.extend(&key, &token, ttl).await, "extend", "lock:order:42");
        server.command(&["DEL", &lock_key(&store, &key)]);

        // No server at all.
        server.stop();
        assert_names_the_key(store.try_acquire(&key, &token, ttl).await, "acquire", "lock:order:42");
        assert_names_the_key(store.release(&key, &token).await, "release", "lock:order:42");
        assert_names_the_key(store.extend(&key, &token, ttl).await, "extend", "lock:order:42");
        assert_names_the_key(store.inspect(&key).await, "inspect", "lock:order:42");
        server.restart();
    }
}
