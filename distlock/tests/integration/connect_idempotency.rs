//! `distlock::connect_idempotency(url)`: an idempotency store per URL scheme, on real
//! servers.
#![cfg(feature = "idempotency")]

use distlock::idempotency::{Claim, Fingerprint, Idempotency, IdempotencyKey, StoredResponse};
use distlock::LockError;

async fn round_trip(url: &str, backend: &str) {
    let store = distlock::connect_idempotency(url).await.expect("connect");
    assert_eq!(store.backend(), backend);
    let idem = Idempotency::new(store);
    let key = IdempotencyKey::new(format!("connect:{}", distlock::Token::generate().as_str())).unwrap();
    let fp = Fingerprint::of_parts(&[b"a"]);
    let Claim::Started(claim) = idem.claim(&key, fp).await.unwrap() else { panic!("not started") };
    assert!(claim.complete(&StoredResponse::new(200, "ok")).await.unwrap());
    assert!(matches!(idem.claim(&key, fp).await.unwrap(), Claim::Replay(r) if r.status == 200));
}

#[tokio::test]
async fn memory_url() {
    round_trip("memory://", "memory").await;
    let err = distlock::connect_idempotency("memory://host").await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");
    let err = distlock::connect_idempotency("mongodb://db").await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");
    // The etcd store keeps no idempotency records: refused before any I/O.
    let err = distlock::connect_idempotency("etcd://127.0.0.1:1").await.unwrap_err();
    assert!(matches!(err, LockError::Unsupported { backend: "etcd", .. }), "{err}");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_url() {
    let Some(url) = distlock_conformance::kit::redis_url("connect_idempotency redis") else { return };
    round_trip(&url, "redis").await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_url() {
    let Some(url) = distlock_conformance::kit::postgres_url("connect_idempotency postgres") else { return };
    round_trip(&url, "postgres").await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_url() {
    let Some(url) = distlock_conformance::kit::mysql_url("connect_idempotency mysql") else { return };
    round_trip(&url, "mysql").await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_url() {
    let dir = distlock_conformance::kit::fresh_dir("connect-idem");
    let url = format!("sqlite://{}", dir.join("locks.db").display());
    round_trip(&url, "sqlite").await;
    let err = distlock::connect_idempotency("sqlite://relative.db?table=x-y").await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");
}
