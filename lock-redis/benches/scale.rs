//! Scale-out stores beside a single node, in one run (issue 17, item 6): one acquire +
//! release cycle through `LockStore` (fixed token), one task, on private `redis-server`s
//! started here on loopback (one for the single node, a three-master cluster, one per Redlock master).
//!
//! ```text
//! cargo bench -p distlock-redis --bench scale
//! DISTLOCK_BENCH_ROUNDS=7 cargo bench -p distlock-redis --bench scale   # shorter
//! ```
//!
//! Variants, in rotating order per round: the single-node store, Redis Cluster (three
//! masters started by the kit; one lock's commands go to one master), Redlock over 3 masters
//! (the acquire and the release fan out to the masters in parallel, so a cycle costs
//! about one single-node cycle plus the slowest master's share), and Redlock over 5.
//! Each comparison runs without and with fencing (Redlock: clock fences, and the release
//! raises each master's counter).

use std::sync::Arc;
use std::time::Duration;

use distlock_api::DynLockStore;
use distlock_conformance::kit::bench::{
    interleaved_rounds, report_against_first, rounds, run, Scenario, Stop, StoreDirect,
};
use distlock_conformance::kit::redis_cluster::RedisCluster;
use distlock_conformance::kit::redis_server::RedisServer;
use distlock_redis::{RedisClusterStore, RedisLockStore, RedlockStore};

const CYCLES: u64 = 1_000;
const TTL: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_millis(50);

fn redlock_url(servers: &[RedisServer], query: &str) -> String {
    let hosts: Vec<String> = servers.iter().map(|server| format!("127.0.0.1:{}", server.port())).collect();
    format!("redlock://{}{query}", hosts.join(","))
}

fn direct(store: Arc<DynLockStore>) -> Arc<StoreDirect> {
    Arc::new(StoreDirect::new(store, TTL, RETRY).expect("ttl"))
}

fn main() {
    let rounds = rounds(21);
    let single = RedisServer::start();
    let masters: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let cluster = RedisCluster::start();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        println!("distlock-redis scale-out benchmark: private servers on loopback, {rounds} rounds, median round");
        for query in ["", "?fencing=true"] {
            let single: Arc<DynLockStore> =
                Arc::new(RedisLockStore::connect(&format!("{}{query}", single.url())).await.expect("single node"));
            let three: Arc<DynLockStore> =
                Arc::new(RedlockStore::connect(&redlock_url(&masters[..3], query)).await.expect("redlock 3"));
            let five: Arc<DynLockStore> =
                Arc::new(RedlockStore::connect(&redlock_url(&masters, query)).await.expect("redlock 5"));
            let cluster: Arc<DynLockStore> =
                Arc::new(RedisClusterStore::connect(&format!("{}{query}", cluster.url())).await.expect("cluster"));
            let lockers = [direct(single), direct(cluster), direct(three), direct(five)];
            let samples = interleaved_rounds(&[0, 1, 2, 3], rounds, |variant: usize| {
                let locker = Arc::clone(&lockers[variant]);
                async move {
                    run(&locker, Scenario::Uncontended, "bench:scale:", Stop::Cycles(CYCLES)).await.expect("cycle");
                }
            })
            .await;
            #[allow(clippy::cast_precision_loss)]
            report_against_first(
                &format!("uncontended acquire+release through the store, 1 task, {CYCLES} cycles/round{query}"),
                "µs/cycle",
                CYCLES as f64,
                &["single node", "cluster, 3 masters", "redlock, 3 masters", "redlock, 5 masters"],
                &samples,
            );
        }
    });
}
