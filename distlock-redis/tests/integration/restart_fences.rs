//! Fencing numbers across a restart of a server without persistence (issue 17, item 4).
//!
//! A private `redis-server` (no AOF, no RDB) is restarted in the middle of each run. With
//! counter fences the numbers start again at 1, and a fence-checking resource then
//! accepts a paused holder's stale write; with clock fences (`?fences=clock`) every
//! number after the restart is greater than every number before it, on the plain, the
//! queued (fair waiting) and the lock-group acquire paths.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{GroupMember, LockError, LockGroup, LockManager, LockOptions};
use distlock_conformance::kit::redis_server::RedisServer;
use distlock_redis::RedisLockStore;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);
const TRIALS: usize = 3;

/// A resource that checks fences: it accepts a write only if its fence is at least the
/// greatest one it has seen.
#[derive(Debug, Default)]
struct FencedResource {
    highest: u64,
}

impl FencedResource {
    fn write(&mut self, fence: u64) -> bool {
        if fence < self.highest {
            return false;
        }
        self.highest = fence;
        true
    }
}

async fn manager(server: &RedisServer, fences: &str) -> LockManager {
    let url = format!("{}?fencing=true&fences={fences}&prefix=restart", server.url());
    LockManager::new(Arc::new(RedisLockStore::connect(&url).await.expect("connect")))
}

/// Retries `attempt` while the connection comes back after the restart (bounded).
async fn after_restart<T, F, Fut>(mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(err) if Instant::now() < deadline => {
                eprintln!("reconnecting after the restart: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("the store did not come back after the restart: {err}"),
        }
    }
}

async fn fence_of(locks: &LockManager, key: &str) -> Result<u64, LockError> {
    let lock = locks.try_lock(key, TTL).await?.expect("the key is free");
    let fence = lock.fence().expect("fencing mode");
    lock.release().await?;
    Ok(fence)
}

/// Acquisitions until one holds fence ≥ 5 and is "paused" (left held), a restart, a
/// new holder: returns (paused holder's fence, new holder's fence).
async fn paused_holder_across_a_restart(server: &mut RedisServer, fences: &str) -> (u64, u64) {
    let locks = manager(server, fences).await;
    let mut paused = 0;
    for _ in 0..5 {
        paused = fence_of(&locks, "job").await.unwrap();
    }
    // The paused holder keeps its lease (and its number); the server restarts meanwhile.
    let _paused_lock = locks.try_lock("job", TTL).await.unwrap().expect("free");
    let paused = paused.max(_paused_lock.fence().unwrap());
    tokio::task::block_in_place(|| server.restart());
    let fresh = after_restart(|| fence_of(&locks, "job")).await;
    (paused, fresh)
}

#[tokio::test(flavor = "multi_thread")]
async fn counter_fences_restart_at_one_and_a_stale_write_gets_through() {
    let Some(mut server) = RedisServer::start_or_skip("counter fences across a restart") else { return };
    for trial in 0..TRIALS {
        let (paused, fresh) = paused_holder_across_a_restart(&mut server, "counter").await;
        assert!(paused >= 5, "trial {trial}: {paused}");
        assert_eq!(fresh, 1, "trial {trial}: without persistence the counter starts again");
        let mut resource = FencedResource::default();
        assert!(resource.write(fresh), "the new holder writes");
        assert!(resource.write(paused), "trial {trial}: the paused holder's stale write is accepted (the problem)");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn clock_fences_keep_increasing_across_restarts() {
    let Some(mut server) = RedisServer::start_or_skip("clock fences across a restart") else { return };
    let mut previous = 0;
    for trial in 0..TRIALS {
        let (paused, fresh) = paused_holder_across_a_restart(&mut server, "clock").await;
        assert!(paused > previous, "trial {trial}: {paused} after {previous}");
        assert!(fresh > paused, "trial {trial}: {fresh} after the restart, {paused} before");
        let mut resource = FencedResource::default();
        assert!(resource.write(fresh), "the new holder writes");
        assert!(!resource.write(paused), "trial {trial}: the paused holder's stale write is refused");
        previous = fresh;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn clock_fences_of_queued_and_group_acquisitions_survive_a_restart() {
    let Some(mut server) = RedisServer::start_or_skip("clock fences, queue and groups") else { return };
    let locks = manager(&server, "clock").await;
    let waiting = LockOptions::new().wait(Duration::from_secs(5)).retry_interval(Duration::from_millis(10));
    let group = LockGroup::single(GroupMember::exclusive("g").unwrap()).unwrap();
    let mut previous = 0;
    for trial in 0..TRIALS {
        // A waiting acquisition goes through the queued-acquire script.
        let queued = after_restart(|| async {
            let lock = locks.lock_opts("q", TTL, &waiting).await?;
            let fence = lock.fence().expect("fencing mode");
            lock.release().await?;
            Ok(fence)
        })
        .await;
        let grouped = after_restart(|| async {
            let lock = locks.try_lock_group(&group, TTL).await?.expect("free");
            let fence = lock.stamp().expect("fencing mode");
            lock.release().await?;
            Ok(fence)
        })
        .await;
        let plain = after_restart(|| fence_of(&locks, "p")).await;
        assert!(
            previous < queued && queued < grouped && grouped < plain,
            "trial {trial}: {previous} {queued} {grouped} {plain}"
        );
        previous = plain;
        tokio::task::block_in_place(|| server.restart());
    }
    // One store, one counter: every number is near the server's clock in µs.
    let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros();
    let previous = u128::from(previous);
    assert!(previous <= now_us && now_us - previous < 600_000_000, "{previous} vs {now_us}");
}
