//! `distlock::connect` against real servers, per enabled feature.

use std::time::Duration;

use distlock::LockManager;

async fn round_trip(url: &str, backend: &str) {
    let store = distlock::connect(url).await.unwrap_or_else(|err| panic!("connect {backend}: {err}"));
    assert_eq!(store.backend(), backend);
    let locks = LockManager::new(store);
    let key = format!("front:{}", uuid_like());
    let lock = locks.lock(&key, Duration::from_secs(10)).await.unwrap();
    assert!(locks.try_lock(&key, Duration::from_secs(10)).await.unwrap().is_none());
    assert!(lock.release().await.unwrap());
}

fn uuid_like() -> String {
    distlock::Token::generate().as_str().to_owned()
}

#[tokio::test]
async fn memory_url() {
    round_trip("memory://", "memory").await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_url() {
    let Some(url) = distlock_conformance::kit::redis_url("distlock::connect redis") else { return };
    round_trip(&url, "redis").await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_url() {
    let Some(url) = distlock_conformance::kit::postgres_url("distlock::connect postgres") else { return };
    round_trip(&url, "postgres").await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_url() {
    let Some(url) = distlock_conformance::kit::mysql_url("distlock::connect mysql") else { return };
    round_trip(&url, "mysql").await;
    let mariadb = url.replacen("mysql://", "mariadb://", 1);
    round_trip(&mariadb, "mysql").await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn unreachable_mysql_is_a_typed_error() {
    let outcome = tokio::time::timeout(Duration::from_secs(30), distlock::connect("mysql://root@127.0.0.1:1/x")).await;
    let err = outcome.expect("connect hung").expect_err("nothing listens on port 1");
    assert!(matches!(err, distlock::LockError::Store { backend: "mysql", .. }), "{err}");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn unreachable_redis_is_a_typed_error() {
    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(30), distlock::connect("redis://127.0.0.1:1")).await;
    let err = outcome.expect("connect hung").expect_err("nothing listens on port 1");
    assert!(matches!(err, distlock::LockError::Store { backend: "redis", .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
}
