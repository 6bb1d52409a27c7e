//! Fair waiting's traffic, against a private etcd started by the test kit (its request
//! counters are this test's alone): a release wakes the next waiter, not every waiter.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockKey, LockManager, LockOptions};
use distlock_conformance::kit::etcd_server::EtcdCluster;
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
