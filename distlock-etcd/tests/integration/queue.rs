//! Fair waiting's traffic, against a private etcd started by the test kit (its request
//! counters are this test's alone): a release wakes the next waiter, not every waiter.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_api::{DynLockStore, LockKey, LockManager, LockOptions, Token};
use distlock_conformance::kit::etcd_server::EtcdCluster;
use distlock_etcd::etcd_client::{EventType, PutOptions, WatchOptions};
use distlock_etcd::EtcdLockStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The `Txn` requests etcd has answered, from its metrics page.
async fn txns_answered(cluster: &EtcdCluster) -> u64 {
    answered(cluster, &["Txn"]).await
}

/// The requests of the `methods` of etcd's KV service it has answered, from its metrics page.
async fn answered(cluster: &EtcdCluster, methods: &[&str]) -> u64 {
    let mut stream = TcpStream::connect(cluster.client_addr(0)).await.expect("connect to etcd's metrics");
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: etcd\r\n\r\n").await.unwrap();
    let mut page = String::new();
    stream.read_to_string(&mut page).await.unwrap();
    page.lines()
        .filter(|line| line.starts_with("grpc_server_handled_total{"))
        .filter(|line| methods.iter().any(|method| line.contains(&format!("grpc_method=\"{method}\""))))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .map(|count| count as u64)
        .sum()
}

/// Twelve waiters queue on one held key, then take it in turn, each releasing at once.
///
/// Each waiter waits on the place just ahead of its own, and the next in line on the lock
/// key, so a hand-over costs the new holder's attempt and the next waiter's one look. A
/// release that woke every waiter would cost each of them a look at every hand-over
/// (about 70 more transactions here).
#[test]
fn a_hand_over_wakes_the_next_waiter_alone() {
    let Some(cluster) = EtcdCluster::start_or_skip("a_hand_over_wakes_the_next_waiter_alone", 1) else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        const WAITERS: usize = 12;
        let store = EtcdLockStore::builder().key_prefix("queue").connect(&cluster.url()).await.expect("connect");
        let store: Arc<DynLockStore> = Arc::new(store);
        let locks = LockManager::new(Arc::clone(&store));
        let ttl = Duration::from_secs(30);
        // A long retry interval: waiters are woken, not polling.
        let options = LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(10));
        let holder = locks.lock("hot", ttl).await.unwrap();
        let mut waiters = Vec::new();
        for _ in 0..WAITERS {
            let locks = locks.clone();
            waiters.push(tokio::spawn(async move {
                let lock = locks.lock_opts("hot", ttl, &options).await.expect("the waiter's turn came");
                lock.release().await.unwrap()
            }));
        }
        let queued = store.queue().unwrap();
        let key = LockKey::new("hot").unwrap().to_store_key();
        while queued.queue_len(&key).await.unwrap() < WAITERS {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Every waiter is queued; once no request comes in for a while, every waiter has
        // looked and is asleep. From here on, the hand-overs alone.
        let mut before = txns_answered(&cluster).await;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = txns_answered(&cluster).await;
            if now == before {
                break;
            }
            before = now;
        }
        assert!(holder.release().await.unwrap());
        for waiter in waiters {
            assert!(tokio::time::timeout(Duration::from_secs(30), waiter).await.expect("hand-overs stalled").unwrap());
        }
        let txns = txns_answered(&cluster).await - before;
        let per_hand_over = txns as f64 / WAITERS as f64;
        println!("{txns} transactions for {WAITERS} hand-overs ({per_hand_over:.1} each)");
        assert!(per_hand_over < 5.0, "{txns} transactions for {WAITERS} hand-overs: waiters looked at every release");
    });
}

/// The key requests of waiters of `hot` since `since` (a [`settled`] count), once its queue
/// holds `places` and they are all asleep: all requests but this function's own
/// `queue_len` counts (ranges).
async fn requests_to_queue(cluster: &EtcdCluster, store: &DynLockStore, places: usize, since: u64) -> u64 {
    let key = LockKey::new("hot").unwrap().to_store_key();
    let queue = store.queue().unwrap();
    let mut looks = 0;
    while queue.queue_len(&key).await.unwrap() < places {
        looks += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    settled(cluster).await - since - (looks + 1)
}

/// Requests that read or write keys (a lease's grant or keep-alive is not one).
const KEY_REQUESTS: [&str; 4] = ["Txn", "Put", "Range", "DeleteRange"];

/// The requests answered once none has come in for 200 ms.
async fn settled(cluster: &EtcdCluster) -> u64 {
    let mut before = answered(cluster, &KEY_REQUESTS).await;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = answered(cluster, &KEY_REQUESTS).await;
        if now == before {
            return now;
        }
        before = now;
    }
}

/// A fair waiter queues with its first attempt, one transaction that takes the key when
/// free and nobody waits, else the place: a free key costs one request, a held one the
/// attempt and the waiter's one look before it sleeps, also behind another waiter.
#[test]
fn a_fair_waiter_queues_with_its_first_attempt() {
    let Some(cluster) = EtcdCluster::start_or_skip("a_fair_waiter_queues_with_its_first_attempt", 1) else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let store = EtcdLockStore::builder().key_prefix("first").connect(&cluster.url()).await.expect("connect");
        let store: Arc<DynLockStore> = Arc::new(store);
        let locks = LockManager::new(Arc::clone(&store));
        let ttl = Duration::from_secs(30);
        let options = LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(10));

        let before = settled(&cluster).await;
        let holder = locks.lock_opts("hot", ttl, &options).await.unwrap();
        let after = answered(&cluster, &KEY_REQUESTS).await;
        assert_eq!(after - before, 1, "a fair acquisition of a free key took {} requests", after - before);

        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move { locks.lock_opts("hot", ttl, &options).await.expect("the waiter's turn came").release().await }
        });
        let queued = requests_to_queue(&cluster, &*store, 1, after).await;
        assert_eq!(queued, 2, "a waiter took {queued} requests to queue and sleep (the attempt, then one look)");

        // A waiter behind another reads the place ahead of its own with its attempt, and
        // its one look finds it watching that place already.
        let settled_first = settled(&cluster).await;
        let second = tokio::spawn({
            let locks = locks.clone();
            async move {
                locks.lock_opts("hot", ttl, &options).await.expect("the second waiter's turn came").release().await
            }
        });
        let queued = requests_to_queue(&cluster, &*store, 2, settled_first).await;
        assert_eq!(queued, 2, "a second waiter took {queued} requests to queue and sleep (the attempt, then one look)");

        assert!(holder.release().await.unwrap());
        for waiter in [waiter, second] {
            assert!(tokio::time::timeout(Duration::from_secs(30), waiter)
                .await
                .expect("the hand-over stalled")
                .unwrap()
                .unwrap());
        }
    });
}

/// Four tasks of one store take turns on a key, each waiting in the queue 25 times: the
/// store names their places from a few slots it uses again (one per waiter it has at
/// once), so the queue's waits leave no deleted key each in etcd's index, which keeps
/// deleted keys until a compaction and walks them at every read of the queue.
#[test]
fn waits_use_a_few_place_keys_again() {
    let Some(cluster) = EtcdCluster::start_or_skip("waits_use_a_few_place_keys_again", 1) else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        const TASKS: usize = 4;
        const SECTIONS: usize = 25;
        let store = EtcdLockStore::builder().key_prefix("slots").connect(&cluster.url()).await.expect("connect");
        let client = store.client().clone();
        let store: Arc<DynLockStore> = Arc::new(store);
        let locks = LockManager::new(store);
        let ttl = Duration::from_secs(30);
        let options = LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(10));
        let start = client.kv_client().get("slots/", None).await.unwrap().header().unwrap().revision();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let locks = locks.clone();
                tokio::spawn(async move {
                    for _ in 0..SECTIONS {
                        let lock = locks.lock_opts("hot", ttl, &options).await.expect("the task's turn came");
                        assert!(lock.release().await.unwrap());
                    }
                })
            })
            .collect();
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(60), task).await.expect("the turns stalled").unwrap();
        }
        // Every place put since `start`, read back from etcd's history up to an end mark.
        client.kv_client().put("slots/queue/~end", "", None).await.unwrap();
        let options = WatchOptions::new().with_prefix().with_start_revision(start + 1);
        let mut history = client.watch_client().watch("slots/queue/", Some(options)).await.unwrap();
        let (mut places, mut keys) = (0, HashSet::new());
        'read: loop {
            let answer = tokio::time::timeout(Duration::from_secs(10), history.message()).await;
            let answer = answer.expect("the history stopped short of the end mark").unwrap().expect("a history");
            for event in answer.events().iter().filter(|event| event.event_type() == EventType::Put) {
                let key = event.kv().unwrap().key_str().unwrap().to_owned();
                if key == "slots/queue/~end" {
                    break 'read;
                }
                places += 1;
                keys.insert(key);
            }
        }
        assert!(places >= SECTIONS, "the tasks took {places} places: too few waits to tell");
        assert!(keys.len() <= TASKS, "{places} places under {} keys (more than the {TASKS} waiters)", keys.len());
    });
}

/// A place named after its token, with the time it was taken alone as its value (as a
/// store named places before it named them by slot), is listed beside the store's own.
#[test]
fn places_named_after_their_token_are_listed() {
    let Some(cluster) = EtcdCluster::start_or_skip("places_named_after_their_token_are_listed", 1) else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let store = EtcdLockStore::builder().key_prefix("layouts").connect(&cluster.url()).await.expect("connect");
        let client = store.client().clone();
        let store: Arc<DynLockStore> = Arc::new(store);
        let locks = LockManager::new(Arc::clone(&store));
        let ttl = Duration::from_secs(30);
        let options = LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(10));
        let holder = locks.lock("hot", ttl).await.unwrap();
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move { locks.lock_opts("hot", ttl, &options).await.expect("the waiter's turn came").release().await }
        });
        let key = LockKey::new("hot").unwrap().to_store_key();
        let queue = store.queue().unwrap();
        while queue.queue_len(&key).await.unwrap() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let token = Token::generate();
        let lease = client.lease_client().grant(30, None).await.unwrap().id();
        let placed_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() - 1_000;
        let place = format!("layouts/queue/lock:hot\u{1f}{}", token.as_str());
        client.kv_client().put(place, placed_ms.to_string(), Some(PutOptions::new().with_lease(lease))).await.unwrap();

        let places = queue.queue_places(&key).await.unwrap();
        assert_eq!(places.len(), 2, "{places:?}");
        assert_ne!(places[0].token, token, "the store's own waiter came first");
        assert_eq!(places[1].token, token);
        assert!(places[1].waited.is_some_and(|waited| waited >= Duration::from_millis(900)), "{places:?}");

        client.lease_client().revoke(lease).await.unwrap();
        assert!(holder.release().await.unwrap());
        let released = tokio::time::timeout(Duration::from_secs(30), waiter).await.expect("the hand-over stalled");
        assert!(released.unwrap().unwrap());
    });
}
