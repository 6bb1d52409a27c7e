//! Fair waiting across processes: waiters in separate processes are served in the order
//! they queued, and a waiter killed with `kill -9` while queued holds the others up no
//! longer than its place's lease; on Redis and PostgreSQL, through `connect(url)`.
#![cfg(all(feature = "redis", feature = "postgres"))]

use std::time::{Duration, Instant};

use distlock::{LockKey, LockManager, LockOptions};
use distlock_conformance::kit::child::{self, ChildProcess};

const KEY: &str = "jobs:hot";
/// A waiter's retry interval: its place lasts 3 × this + 500 ms = 1.1 s.
const RETRY: Duration = Duration::from_millis(200);

/// A store URL with a namespace of its own (a Redis key prefix, a PostgreSQL schema);
/// Redis with fair waiting and notifications, in fencing mode, so fences show the order
/// of acquisition.
fn private_url(base: &str, name: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    if base.starts_with("redis") {
        format!("{base}{separator}prefix={name}:&fencing=true&fair=true&notifications=true")
    } else {
        format!("{base}{separator}schema={name}&create=true")
    }
}

/// The child: waits for the key, announces its fence, holds the key briefly, releases.
#[tokio::test(flavor = "multi_thread")]
async fn child_entry_waits_for_its_turn() {
    let Some(url) = child::role_arg("waiter") else { return };
    let locks = LockManager::new(distlock::connect(&url).await.unwrap());
    let options = LockOptions::new().wait(Duration::from_secs(120)).retry_interval(RETRY);
    let held = locks.lock_opts(KEY, Duration::from_secs(30), &options).await.unwrap();
    child::announce(&format!("ACQUIRED {}", held.fence().expect("a fencing store")));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(held.release().await.unwrap());
}

async fn queue_reaches(locks: &LockManager, len: usize) {
    let key = LockKey::new(KEY).unwrap().to_store_key();
    let deadline = Instant::now() + Duration::from_secs(60);
    let queue = locks.store().queue().expect("the store keeps a queue");
    while queue.queue_len(&key).await.unwrap() != len {
        assert!(Instant::now() < deadline, "the queue never reached {len}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn waiters_in_other_processes_are_served_in_arrival_order(base: &str) {
    let name = format!("fair_{}", distlock::Token::generate().as_str().replace('-', "")[..12].to_owned());
    let url = private_url(base, &name);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let locks = runtime.block_on(async { LockManager::new(distlock::connect(&url).await.unwrap()) });
    let held = runtime.block_on(locks.try_lock(KEY, Duration::from_secs(60))).unwrap().expect("a free key");

    let mut children = Vec::new();
    for i in 0..4 {
        children.push(ChildProcess::spawn("fair_processes::child_entry_waits_for_its_turn", "waiter", &url));
        runtime.block_on(queue_reaches(&locks, i + 1));
    }
    // The second waiter dies in the queue; its place lapses, it never gets the key.
    children[1].kill9();
    let released_at = Instant::now();
    assert!(runtime.block_on(held.release()).unwrap());

    let mut fences = Vec::new();
    for i in [0, 2, 3] {
        let line = children[i].wait_for_line("ACQUIRED ", Duration::from_secs(60));
        fences.push((i, line.trim_start_matches("ACQUIRED ").trim().parse::<u64>().unwrap()));
    }
    let served = released_at.elapsed();
    let mut by_fence = fences.clone();
    by_fence.sort_by_key(|(_, fence)| *fence);
    let order: Vec<usize> = by_fence.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 2, 3], "served in arrival order: {fences:?}");
    // Three 50 ms sections and one lapsed place (1.1 s), with a generous margin.
    assert!(served < Duration::from_secs(15), "the queue took {served:?}");
    runtime.block_on(queue_reaches(&locks, 0));
}

#[test]
fn redis_waiters_in_other_processes_are_served_in_arrival_order() {
    let Some(url) = distlock_conformance::kit::redis_url("fair waiting across processes on redis") else { return };
    waiters_in_other_processes_are_served_in_arrival_order(&url);
}

#[test]
fn postgres_waiters_in_other_processes_are_served_in_arrival_order() {
    let Some(url) = distlock_conformance::kit::postgres_url("fair waiting across processes on postgres") else {
        return;
    };
    waiters_in_other_processes_are_served_in_arrival_order(&url);
}
