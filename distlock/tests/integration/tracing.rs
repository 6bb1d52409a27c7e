//! Tracing output names the lock key and the backend, never the token.
#![cfg(feature = "memory")]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::Buffer;
use distlock::{LockManager, LockOptions};

#[test]
fn events_carry_the_key_and_backend_but_never_the_token() {
    let buffer = Buffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(buffer.clone())
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL)
        .finish();
    let mut tokens = Vec::new();
    tracing::subscriber::with_default(subscriber, || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let locks = LockManager::new(Arc::new(distlock::memory::MemoryLockStore::new()));
            let ttl = Duration::from_secs(10);
            // acquire, contention, release
            let lock = locks.lock("trace:order:1", ttl).await.unwrap();
            tokens.push(lock.token().clone());
            assert!(locks.try_lock("trace:order:1", ttl).await.unwrap().is_none());
            assert!(lock.release().await.unwrap());
            // background release of a dropped handle
            let dropped = locks.lock("trace:order:2", ttl).await.unwrap();
            tokens.push(dropped.token().clone());
            drop(dropped);
            locks.flush_releases().await;
            // renewal, then loss
            let options = LockOptions::new().renew_every(Duration::from_millis(30));
            let renewed = locks.lock_opts("trace:order:3", Duration::from_millis(300), &options).await.unwrap();
            tokens.push(renewed.token().clone());
            tokio::time::sleep(Duration::from_millis(80)).await;
            assert!(locks.store().release(renewed.store_key(), renewed.token()).await.unwrap());
            tokio::time::timeout(Duration::from_secs(5), renewed.lost()).await.unwrap();
        });
    });
    let output = buffer.text();
    for expected in [
        "lock acquired",
        "lock held by another owner",
        "lock released",
        "dropped lock released in the background",
        "lease renewed",
        "lease lost",
        "distlock.acquire",
        "distlock.release",
        "distlock.renew",
        "lock.key=trace:order:1",
        "lock.key=trace:order:2",
        "lock.key=trace:order:3",
        "backend=\"memory\"",
    ] {
        assert!(output.contains(expected), "missing {expected:?} in:\n{output}");
    }
    for token in &tokens {
        assert!(!output.contains(token.as_str()), "token in tracing output:\n{output}");
        assert!(!output.contains(token.short()), "token prefix in tracing output:\n{output}");
    }
}
