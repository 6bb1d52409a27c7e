//! Redis Cluster: the whole conformance suite (lock groups with hash-tagged names) on a
//! private three-master cluster, the key layout (one slot per lock, one per group's tag),
//! sharded notifications, refusal of groups across tags, release-owner across masters,
//! and mutual exclusion while the hot key's slot migrates (`ASK`/`MOVED`).

use crate::scale_kit;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{GroupMember, LockError, LockGroup, LockKey, LockManager, LockOptions, LockStore, OwnerId};
use distlock_conformance::kit::redis_cluster::RedisCluster;
use distlock_redis::RedisClusterStore;

mod fenced {
    async fn store() -> Option<std::sync::Arc<distlock_api::DynLockStore>> {
        super::scale_kit::cluster_store("?fencing=true&prefix=cc").await
    }
    distlock_conformance::conformance_suite!(store);
}

fn start(test: &str) -> Option<RedisCluster> {
    tokio::task::block_in_place(|| RedisCluster::start_or_skip(test))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_key_of_a_lock_is_in_one_slot_and_locks_spread_over_the_masters() {
    let Some(cluster) = start("cluster layout") else { return };
    let store = RedisClusterStore::connect(&format!("{}?fencing=true&prefix=app", cluster.url())).await.unwrap();
    let locks = LockManager::new(Arc::new(store.clone()));
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..30 {
        let name = format!("order:{i}");
        let key = LockKey::new(&name).unwrap().to_store_key();
        let lock = locks.try_lock(&name, Duration::from_secs(30)).await.unwrap().expect("free");
        assert!(lock.fence().is_some());
        // The documented layout: `{prefix}:{lock:<key>}` and its `:fence`, `:holder`, `:released`.
        let redis_key = format!("app:{{{}}}", key.as_str());
        assert_eq!(redis_key, format!("app:{{lock:{name}}}"));
        let slot = tokio::task::block_in_place(|| cluster.slot_of(&redis_key));
        for other in ["fence", "holder", "released", "queue", "queue-ttl"].map(|part| format!("{redis_key}:{part}")) {
            assert_eq!(tokio::task::block_in_place(|| cluster.slot_of(&other)), slot, "{other}");
        }
        owners.insert(tokio::task::block_in_place(|| cluster.owner_of(&redis_key)));
        assert!(lock.release().await.unwrap());
    }
    assert_eq!(owners.len(), 3, "30 locks all on the same master");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_across_hash_tags_is_refused_before_any_io_and_nothing_is_held() {
    let Some(cluster) = start("cluster groups") else { return };
    let store = RedisClusterStore::connect(&cluster.url()).await.unwrap();
    assert!(store.capabilities().group_hash_tag);
    // The prefix's settings are recorded: a client with other settings is refused, one
    // with the same (given by a builder) is not.
    let err = RedisClusterStore::connect(&format!("{}?fair=false", cluster.url())).await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains("distlock:lock-settings"), "{err}");
    let same = RedisClusterStore::builder().fair_queue(true).release_notifications(true);
    let same = same.connect(&cluster.url()).await.unwrap();
    assert!(same.capabilities().fair_queue && same.notifications());
    let locks = LockManager::new(Arc::new(store));
    let group = LockGroup::new([
        GroupMember::exclusive("{orders}:a").unwrap(),
        GroupMember::shared("{invoices}:b").unwrap(),
        GroupMember::exclusive("c").unwrap(),
    ])
    .unwrap();
    for wait in [Duration::ZERO, Duration::from_secs(1)] {
        let options = LockOptions::new().wait(wait).retry_interval(Duration::from_millis(10));
        let started = std::time::Instant::now();
        match locks.try_lock_group_opts(&group, Duration::from_secs(5), &options).await {
            Err(LockError::Config { message }) => {
                assert!(message.contains("hash tag") && message.contains("`{orders}:a`, `{orders}:b`"), "{message}");
            }
            other => panic!("expected Config, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_millis(500), "the refusal waited: {:?}", started.elapsed());
    }
    // Nothing was taken: no holder on any name, and each name alone is free.
    for name in ["{orders}:a", "{invoices}:b", "c"] {
        assert!(locks.holders(name).await.unwrap().is_empty(), "{name} has a holder");
        let alone = LockGroup::single(GroupMember::exclusive(name).unwrap()).unwrap();
        let held = locks.try_lock_group(&alone, Duration::from_secs(5)).await.unwrap().expect("free");
        held.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tagged_group_is_atomic_in_one_slot() {
    let Some(cluster) = start("cluster tagged groups") else { return };
    let store = RedisClusterStore::connect(&format!("{}?fencing=true&prefix=app", cluster.url())).await.unwrap();
    let locks = LockManager::new(Arc::new(store.clone()));
    let names = ["{orders}:a", "{orders}:b", "{orders}:c"];
    let group = LockGroup::new(names.iter().map(|name| GroupMember::exclusive(name).unwrap())).unwrap();
    // Every key the group scripts touch is in the tag's slot.
    let slot = tokio::task::block_in_place(|| cluster.slot_of("orders"));
    let mut keys = vec![
        format!("app:group-lease:{{orders}}:{}", distlock_api::Token::generate().as_str()),
        "app:group-fence:{orders}".to_owned(),
        "app:group-released:{orders}".to_owned(),
    ];
    for name in names {
        let stem = format!("app:group:{{orders}}:{name}");
        keys.push(format!("{stem}:h"));
        keys.push(format!("{stem}:p"));
        keys.push(format!("{stem}:w"));
    }
    for key in &keys {
        assert_eq!(tokio::task::block_in_place(|| cluster.slot_of(key)), slot, "{key}");
    }
    let held = locks.try_lock_group(&group, Duration::from_secs(30)).await.unwrap().expect("free");
    assert!(held.stamp().is_some_and(|stamp| stamp > 0));
    // All or nothing: a group needing one of its names is refused whole and leaves nothing.
    let overlapping =
        LockGroup::new([GroupMember::exclusive("{orders}:c").unwrap(), GroupMember::exclusive("{orders}:d").unwrap()])
            .unwrap();
    assert!(locks.try_lock_group(&overlapping, Duration::from_secs(30)).await.unwrap().is_none());
    assert!(locks.holders("{orders}:d").await.unwrap().is_empty());
    held.release().await.unwrap();
    let now = locks.try_lock_group(&overlapping, Duration::from_secs(30)).await.unwrap().expect("free after release");
    now.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn release_owner_visits_every_master() {
    let Some(cluster) = start("cluster release owner") else { return };
    let store = RedisClusterStore::connect(&cluster.url()).await.unwrap();
    let mine = LockManager::new(Arc::new(store.clone())).with_owner(OwnerId::new("cluster", "mine").unwrap());
    let theirs = LockManager::new(Arc::new(store.clone())).with_owner(OwnerId::new("cluster", "theirs").unwrap());
    // Tags on every master.
    let mut masters = std::collections::BTreeSet::new();
    let mut tags = Vec::new();
    for i in 0.. {
        let tag = format!("t{i}");
        if masters.insert(tokio::task::block_in_place(|| cluster.owner_of(&tag))) || tags.len() < 6 {
            tags.push(tag);
        }
        if masters.len() == 3 && tags.len() >= 6 {
            break;
        }
    }
    let mut kept = Vec::new();
    for tag in &tags {
        let group = |who: &str| {
            LockGroup::new([
                GroupMember::exclusive(&format!("{{{tag}}}:{who}:a")).unwrap(),
                GroupMember::shared(&format!("{{{tag}}}:{who}:b")).unwrap(),
            ])
            .unwrap()
        };
        mine.try_lock_group(&group("mine"), Duration::from_secs(30)).await.unwrap().expect("free").into_stamp();
        kept.push(theirs.try_lock_group(&group("theirs"), Duration::from_secs(30)).await.unwrap().expect("free"));
    }
    assert_eq!(mine.release_owner().await.unwrap(), 2 * tags.len() as u64);
    for tag in &tags {
        for name in ["a", "b"] {
            assert!(mine.holders(&format!("{{{tag}}}:mine:{name}")).await.unwrap().is_empty());
            assert_eq!(theirs.holders(&format!("{{{tag}}}:theirs:{name}")).await.unwrap().len(), 1);
        }
    }
    assert_eq!(mine.release_owner().await.unwrap(), 0);
    for held in kept {
        held.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_exclusion_holds_while_the_slot_migrates() {
    let Some(cluster) = start("cluster migration") else { return };
    let store = RedisClusterStore::connect(&format!("{}?fencing=true", cluster.url())).await.unwrap();
    let locks = LockManager::new(Arc::new(store.clone()));
    let key = LockKey::new("hot").unwrap().to_store_key();
    let redis_key = format!("distlock:{{{}}}", key.as_str());
    let slot = tokio::task::block_in_place(|| cluster.slot_of(&redis_key));
    let inside = Arc::new(AtomicBool::new(false));
    let (done, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (locks, inside, done, errors, stop) =
            (locks.clone(), Arc::clone(&inside), Arc::clone(&done), Arc::clone(&errors), Arc::clone(&stop));
        workers.push(tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(10)).retry_interval(Duration::from_millis(5));
            let mut last_fence = 0;
            while !stop.load(Ordering::Relaxed) {
                match locks.lock_opts("hot", Duration::from_secs(10), &options).await {
                    Ok(lock) => {
                        assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                        let fence = lock.fence().unwrap();
                        assert!(fence > last_fence, "fences went backwards: {fence} after {last_fence}");
                        last_fence = fence;
                        tokio::task::yield_now().await;
                        inside.store(false, Ordering::SeqCst);
                        let _ = lock.release().await;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    // A script refused mid-migration (TRYAGAIN): the outcome is unknown, the
                    // manager releases it; try again.
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let ports = cluster.ports();
    for round in 0..4 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let from = tokio::task::block_in_place(|| cluster.owner_of(&redis_key));
        let to = ports[(ports.iter().position(|&p| p == from).unwrap() + 1 + round % 2) % ports.len()];
        tokio::task::block_in_place(|| cluster.migrate_slot(slot, from, to));
        assert_eq!(tokio::task::block_in_place(|| cluster.owner_of(&redis_key)), to);
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let (done, errors) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed));
    assert!(done > 20, "only {done} critical sections ({errors} errors)");
    eprintln!("{done} critical sections, {errors} errors across 4 slot migrations");
}

#[tokio::test(flavor = "multi_thread")]
async fn waiters_are_woken_by_sharded_notifications() {
    let Some(cluster) = start("cluster notifications") else { return };
    let store = RedisClusterStore::connect(&cluster.url()).await.unwrap();
    let locks = LockManager::new(Arc::new(store));
    let held = locks.try_lock("n", Duration::from_secs(30)).await.unwrap().expect("free");
    crate::common::release_wakes_the_waiter(&locks, held, "n").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn group_waiters_are_woken_by_the_tags_shard_channel() {
    let Some(cluster) = start("cluster group notifications") else { return };
    let store = RedisClusterStore::connect(&cluster.url()).await.unwrap();
    let locks = LockManager::new(Arc::new(store.clone()));
    let both =
        LockGroup::new([GroupMember::exclusive("{jobs}:a").unwrap(), GroupMember::exclusive("{jobs}:b").unwrap()])
            .unwrap();
    let held = locks.try_lock_group(&both, Duration::from_secs(30)).await.unwrap().expect("free");
    // A retry interval far longer than the test: only the notification can wake the waiter.
    let options = LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(30));
    let waiter = tokio::spawn({
        let (locks, both) = (locks.clone(), both.clone());
        async move { locks.lock_group_opts(&both, Duration::from_secs(30), &options).await.map(|lock| lock.stamp()) }
    });
    // The waiter's places are recorded once it waits.
    let key = LockKey::new("{jobs}:a").unwrap().to_store_key();
    let groups = distlock_api::LockStore::groups(&store).expect("groups");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while groups.waiting(&key).await.unwrap() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the waiter never took its place");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let released_at = tokio::time::Instant::now();
    held.release().await.unwrap();
    let stamp = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken in time").unwrap().unwrap();
    assert!(released_at.elapsed() < Duration::from_secs(5), "{:?}", released_at.elapsed());
    assert!(stamp.is_none(), "no fencing configured");
}

/// How many `SPUBLISH`es the master serving `key`'s slot has run, the release scripts'
/// own among them (`INFO commandstats` counts the commands a script calls).
fn spublish_calls(cluster: &RedisCluster, key: &str) -> i64 {
    let port = tokio::task::block_in_place(|| cluster.owner_of(key));
    let info = tokio::task::block_in_place(|| cluster.command_on(port, &["INFO", "commandstats"]));
    let info = info.and_then(|reply| reply.as_text()).expect("INFO commandstats");
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_spublish:calls="))
        .map_or(0, |rest| rest.split(',').next().and_then(|calls| calls.parse().ok()).expect("a count of calls"))
}

/// A release publishes on the tag's shard channel only when someone may wait: an
/// uncontended group cycle sends no `SPUBLISH`, and a barging reader, which leaves no
/// place, is woken all the same, well within its 10 s retry interval: its probe marked
/// the name that blocked it, in the tag's slot, so the release published once.
#[tokio::test(flavor = "multi_thread")]
async fn group_releases_publish_on_the_tags_shard_channel_only_for_waiters() {
    let Some(cluster) = start("cluster group release notifications") else { return };
    let store = RedisClusterStore::connect(&format!("{}?prefix=app", cluster.url())).await.unwrap();
    let locks = LockManager::new(Arc::new(store));
    let member = |name: &str, exclusive: bool| {
        if exclusive {
            GroupMember::exclusive(name).unwrap()
        } else {
            GroupMember::shared(name).unwrap()
        }
    };
    let both = LockGroup::new([member("{quiet}:a", true), member("{quiet}:b", true)]).unwrap();
    let before = spublish_calls(&cluster, "{quiet}");
    for _ in 0..3 {
        locks.try_lock_group(&both, Duration::from_secs(30)).await.unwrap().expect("free").release().await.unwrap();
    }
    assert_eq!(spublish_calls(&cluster, "{quiet}"), before, "nobody waited: no SPUBLISH");

    let held = locks.try_lock_group(&both, Duration::from_secs(30)).await.unwrap().expect("free");
    let readers = LockGroup::new([member("{quiet}:a", false), member("{quiet}:b", false)]).unwrap();
    let options = LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(10)).barging();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock_group_opts(&readers, Duration::from_secs(30), &options).await.unwrap().release().await }
    });
    let mark = "app:group:{quiet}:{quiet}:a:w";
    let owner = tokio::task::block_in_place(|| cluster.owner_of(mark));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let marked = tokio::task::block_in_place(|| cluster.command_on(owner, &["EXISTS", mark]));
        if marked.and_then(|reply| reply.as_int()) == Some(1) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the waiter never marked the name");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(spublish_calls(&cluster, "{quiet}"), before, "waiting publishes nothing");
    let released_at = tokio::time::Instant::now();
    held.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken in time").unwrap().unwrap();
    assert!(released_at.elapsed() < Duration::from_secs(3), "{:?}", released_at.elapsed());
    assert_eq!(spublish_calls(&cluster, "{quiet}"), before + 1, "one SPUBLISH: the release the reader waited for");
}

/// `build(client)` on the application's `ClusterClient`: nothing sent until used, the
/// Cluster's defaults (notifications, fair waiting, clock fences), the prefix's settings
/// checked on demand, and a waiter woken by the sharded notification.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_built_on_the_applications_cluster_client_works_like_a_connected_one() {
    use distlock_redis::redis::cluster::ClusterClientBuilder;
    use distlock_redis::redis::ProtocolVersion;

    let Some(cluster) = start("cluster build") else { return };
    let nodes = cluster.ports().into_iter().map(|port| format!("redis://127.0.0.1:{port}"));
    let client = ClusterClientBuilder::new(nodes).use_protocol(ProtocolVersion::RESP3).build().unwrap();
    let prefix = format!("built-{}", distlock_api::Token::generate().as_str());
    let store = RedisClusterStore::builder().key_prefix(&prefix).fencing(true).build(client.clone()).unwrap();
    assert!(store.notifications() && store.fair_queue() && store.clock_fences());
    store.check_shared_settings().await.unwrap();
    // A client of the prefix with other settings is refused, by `connect` and by the check.
    let other = RedisClusterStore::builder().key_prefix(&prefix).fencing(true).fair_queue(false).build(client);
    let err = other.unwrap().check_shared_settings().await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains("lock-settings"), "{err}");
    let err = RedisClusterStore::connect(&format!("{}?prefix={prefix}", cluster.url())).await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");

    let locks = LockManager::new(Arc::new(store));
    let held = locks.try_lock("n", Duration::from_secs(30)).await.unwrap().expect("free");
    assert!(held.fence().is_some());
    crate::common::release_wakes_the_waiter(&locks, held, "n").await;
}
