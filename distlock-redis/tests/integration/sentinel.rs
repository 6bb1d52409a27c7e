//! Redis Sentinel: the whole conformance suite through the sentinels, a failover under a
//! running workload (the store follows the promoted replica; fences keep increasing), and
//! `WAIT` for replicas after each acquisition.

use crate::scale_kit;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockError, LockManager};
use distlock_conformance::kit::redis_sentinel::RedisSentinels;
use distlock_redis::RedisSentinelStore;

mod conformance {
    async fn store() -> Option<std::sync::Arc<distlock_api::DynLockStore>> {
        super::scale_kit::sentinel_store("?fencing=true&prefix=cs&fair=true&notifications=true").await
    }
    distlock_conformance::conformance_suite!(store);
}

fn start(test: &str) -> Option<RedisSentinels> {
    tokio::task::block_in_place(|| RedisSentinels::start_or_skip(test))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_store_follows_a_failover_under_a_running_workload() {
    let Some(mut set) = start("sentinel failover") else { return };
    tokio::task::block_in_place(|| set.wait_until_monitored(Duration::from_secs(30)));
    // The builder's settings reach the store on the master (and on the promoted one).
    let builder = RedisSentinelStore::builder().fencing(true).fair_queue(true);
    let store = builder.connect(&set.url()).await.unwrap();
    assert!(distlock_api::LockStore::capabilities(&store).fair_queue);
    assert_eq!(store.master_address(), format!("127.0.0.1:{}", set.master_port()));
    let locks = LockManager::new(Arc::new(store.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok_before, ok_after, failed) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let killed = Arc::new(AtomicBool::new(false));
    let workload = tokio::spawn({
        let (locks, stop, killed) = (locks.clone(), Arc::clone(&stop), Arc::clone(&killed));
        let (ok_before, ok_after, failed) = (Arc::clone(&ok_before), Arc::clone(&ok_after), Arc::clone(&failed));
        async move {
            let mut last_fence = 0;
            while !stop.load(Ordering::Relaxed) {
                match locks.try_lock("job", Duration::from_secs(5)).await {
                    Ok(Some(lock)) => {
                        let fence = lock.fence().unwrap();
                        assert!(
                            fence > last_fence,
                            "fences went backwards across the failover: {fence} after {last_fence}"
                        );
                        last_fence = fence;
                        let _ = lock.release().await;
                        if killed.load(Ordering::Relaxed) { &ok_after } else { &ok_before }
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(None) => {}
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    killed.store(true, Ordering::Relaxed);
    tokio::task::block_in_place(|| set.kill_master());
    tokio::task::block_in_place(|| set.wait_for_failover(Duration::from_secs(30)));
    // The workload resumes on the promoted replica.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let resumed_from = ok_after.load(Ordering::Relaxed);
    while ok_after.load(Ordering::Relaxed) < resumed_from + 20 {
        assert!(tokio::time::Instant::now() < deadline, "the workload did not resume after the failover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    workload.await.unwrap();
    assert_eq!(store.master_address(), format!("127.0.0.1:{}", set.replica_port()));
    eprintln!(
        "{} cycles before the kill, {} after, {} failed during the failover",
        ok_before.load(Ordering::Relaxed),
        ok_after.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_replicas_acknowledges_or_fails_the_acquisition() {
    let Some(set) = start("sentinel WAIT") else { return };
    let acked =
        RedisSentinelStore::connect(&format!("{}?wait_replicas=1&wait_timeout_ms=2000", set.url())).await.unwrap();
    let locks = LockManager::new(Arc::new(acked));
    let lock = locks.try_lock("w", Duration::from_secs(5)).await.unwrap().expect("one replica acknowledges");
    assert!(lock.release().await.unwrap());
    // Two replicas are asked for, one exists: the acquisition fails and leaves nothing.
    let strict =
        RedisSentinelStore::connect(&format!("{}?wait_replicas=2&wait_timeout_ms=100", set.url())).await.unwrap();
    let strict_locks = LockManager::new(Arc::new(strict));
    match strict_locks.try_lock("w", Duration::from_secs(5)).await {
        Err(LockError::Store { backend: "redis-sentinel", .. }) => {}
        other => panic!("expected a store error, got {other:?}"),
    }
    strict_locks.flush_releases().await;
    assert!(
        locks.try_lock("w", Duration::from_secs(5)).await.unwrap().is_some(),
        "the failed acquisition left its lease"
    );
}

/// `build(client)` on the application's `SentinelClient`: the builder's settings on the
/// master the client names, a waiter woken by the release notifications, and the store
/// following the master to the promoted replica by asking the client again.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_built_on_the_applications_sentinel_client_follows_a_failover() {
    use distlock_api::{LockOptions, LockStore};
    use distlock_redis::redis::sentinel::{SentinelClient, SentinelServerType};

    let Some(mut set) = start("sentinel build") else { return };
    tokio::task::block_in_place(|| set.wait_until_monitored(Duration::from_secs(30)));
    let sentinels: Vec<String> = set.sentinel_ports().iter().map(|port| format!("redis://127.0.0.1:{port}")).collect();
    let master_name = set.url().rsplit('/').next().unwrap().to_owned();
    let client = SentinelClient::build(sentinels, master_name, None, SentinelServerType::Master).unwrap();
    let builder = RedisSentinelStore::builder().key_prefix("built").fencing(true).release_notifications(true);
    let store = builder.build(client).await.unwrap();
    assert_eq!(store.master_address(), format!("127.0.0.1:{}", set.master_port()));
    assert!(store.capabilities().release_notifications && store.current().clock_fences());
    // A client of the prefix with other settings is refused.
    let other = RedisSentinelStore::connect(&format!("{}?prefix=built&fencing=false", set.url())).await.unwrap_err();
    assert!(matches!(other, LockError::Config { .. }), "{other}");

    let locks = LockManager::new(Arc::new(store.clone()));
    let held = locks.try_lock("n", Duration::from_secs(30)).await.unwrap().expect("free");
    let before = held.fence().unwrap();
    // A retry interval far longer than the test: only the notification can wake the waiter.
    let options = LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(30));
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock_opts("n", Duration::from_secs(30), &options).await.map(|lock| lock.release()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(held.release().await.unwrap());
    let released = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken in time").unwrap();
    assert!(released.unwrap().await.unwrap());

    tokio::task::block_in_place(|| set.kill_master());
    tokio::task::block_in_place(|| set.wait_for_failover(Duration::from_secs(30)));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let after = loop {
        match locks.try_lock("n", Duration::from_secs(30)).await {
            Ok(Some(lock)) => break lock,
            _ => {
                assert!(tokio::time::Instant::now() < deadline, "the store did not follow the failover");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(store.master_address(), format!("127.0.0.1:{}", set.replica_port()));
    assert!(after.fence().unwrap() > before, "fences went backwards across the failover");
    assert!(after.release().await.unwrap());
}
