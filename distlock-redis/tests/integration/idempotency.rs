//! The idempotency suite on a real Redis server, and its key layout.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::idempotency::{DynIdempotencyStore, Fingerprint, IdempotencyKey, IdempotencyStore, StoredResponse};
use distlock_api::{Token, Ttl};
use distlock_conformance::idempotency;
use distlock_conformance::kit::child::{self, ChildProcess};
use distlock_redis::redis::AsyncCommands;
use distlock_redis::RedisIdempotencyStore;

async fn connect() -> Option<RedisIdempotencyStore> {
    let url = distlock_conformance::kit::redis_url("idempotency on redis")?;
    Some(RedisIdempotencyStore::connect(&url).await.expect("connect"))
}

async fn store() -> Option<Arc<DynIdempotencyStore>> {
    Some(Arc::new(connect().await?))
}

distlock_conformance::idempotency_suite!(store);

/// One hash per record under `{prefix}:idem:`, whose key expiry is the lease while
/// running and the retention once completed.
#[tokio::test]
async fn record_is_one_hash_with_key_expiry() {
    let Some(url) = distlock_conformance::kit::redis_url("idempotency key layout") else { return };
    let prefix = format!("t{}", uuid_like());
    let store = RedisIdempotencyStore::connect(&format!("{url}?prefix={prefix}")).await.unwrap();
    let key = IdempotencyKey::new("order:1").unwrap();
    let redis_key = store.redis_key(&key);
    assert_eq!(redis_key, format!("{prefix}:idem:order:1"));
    let token = Token::generate();
    let fp = Fingerprint::of_parts(&[b"a"]);
    store.claim(&key, &fp, &token, Ttl::new(Duration::from_secs(30)).unwrap()).await.unwrap();
    let mut conn =
        distlock_redis::redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let pttl: i64 = conn.pttl(&redis_key).await.unwrap();
    assert!(pttl > 20_000 && pttl <= 30_000, "{pttl}");
    let day = Ttl::new(Duration::from_secs(24 * 3600)).unwrap();
    assert!(store.complete(&key, &token, &StoredResponse::new(200, "x"), day).await.unwrap());
    let pttl: i64 = conn.pttl(&redis_key).await.unwrap();
    assert!(pttl > 24 * 3600 * 1000 - 60_000, "{pttl}");
    let fields: Vec<String> = conn.hkeys(&redis_key).await.unwrap();
    assert_eq!(fields.len(), 2, "{fields:?}"); // fp and resp: the token is gone
    let _: () = conn.del(&redis_key).await.unwrap();
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

/// The child side of [`killed_process_claim_lapses_after_its_lease`]. Returns at once
/// when run as an ordinary test.
#[tokio::test(flavor = "multi_thread")]
async fn child_entry_claims_on_redis() {
    let Some(arg) = child::role_arg("idem-redis-claimer") else { return };
    let (url, key) = arg.split_once(' ').expect("url and key");
    idempotency::claim_and_park(Arc::new(RedisIdempotencyStore::connect(url).await.unwrap()), key).await;
}

/// `kill -9` of a process in the middle of its operation: its claim lapses after the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_process_claim_lapses_after_its_lease() {
    let Some(url) = distlock_conformance::kit::redis_url("idempotency kill -9") else { return };
    let key = format!("kill9:{}", Token::generate().as_str());
    let child =
        ChildProcess::spawn("idempotency::child_entry_claims_on_redis", "idem-redis-claimer", &format!("{url} {key}"));
    idempotency::killed_claimer_lapses_after_its_lease(store().await.unwrap(), child, &key).await;
}
