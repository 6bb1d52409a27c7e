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
//!
//! Then the Redlock floor, in one interleaved run: the same `SET NX PX` + release script
//! sent raw (redis-rs, on the stores' own connections) to one master and to three masters
//! in parallel (`join_all`, granted on a majority), beside the single-node store and the
//! three-master Redlock store — library ÷ single, raw fan-out ÷ raw single and library ÷
//! raw fan-out. Both stores run without notifications there, so they send exactly the raw
//! commands (with notifications a release pipelines a `PUBLISH` behind its script).
//!
//! ```text
//! DISTLOCK_BENCH_ONLY=redlock cargo bench -p distlock-redis --bench scale   # only the floor
//! ```

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockError, LockKey, Token};
use distlock_conformance::kit::bench::{
    interleaved_rounds, on_worker, report_against_first, rounds, run, Locker, Scenario, Stop, StoreDirect,
};
use distlock_conformance::kit::redis_cluster::RedisCluster;
use distlock_conformance::kit::redis_server::RedisServer;
use distlock_redis::redis::aio::ConnectionManager;
use distlock_redis::redis::{self, Value};
use distlock_redis::{RedisClusterStore, RedisLockStore, RedlockStore, RELEASE_SCRIPT};

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

/// The raw floor: `SET key token NX PX ttl` to every connection at once (`join_all`),
/// granted when a majority answered `OK`; the release script (`EVALSHA`) likewise. With
/// one connection, the raw single-node cycle.
struct RawFanout {
    conns: Vec<ConnectionManager>,
    /// Each connection locks its own key (`…:<i>`): the connections go to one server.
    own_keys: bool,
    key_prefix: String,
    release_sha: String,
    ttl_ms: u64,
}

impl RawFanout {
    async fn new(conns: Vec<ConnectionManager>, own_keys: bool, key_prefix: &str) -> Self {
        let mut release_sha = String::new();
        for conn in &conns {
            let mut conn = conn.clone();
            release_sha =
                redis::cmd("SCRIPT").arg("LOAD").arg(RELEASE_SCRIPT).query_async(&mut conn).await.expect("load");
        }
        let ttl_ms = u64::try_from(TTL.as_millis()).expect("ttl");
        Self { conns, own_keys, key_prefix: key_prefix.to_owned(), release_sha, ttl_ms }
    }

    fn quorum(&self) -> usize {
        self.conns.len() / 2 + 1
    }
}

fn raw_error(error: redis::RedisError) -> LockError {
    LockError::store("raw", "cycle", None, error)
}

impl Locker for RawFanout {
    /// The Redis key per connection, the token.
    type Key = (Vec<String>, Token);
    type Guard = ();

    fn key(&self, name: &str) -> Result<Self::Key, LockError> {
        let key = format!("{}:{}", self.key_prefix, LockKey::new(name)?.to_store_key().as_str());
        let keys = (0..self.conns.len()).map(|i| if self.own_keys { format!("{key}:{i}") } else { key.clone() });
        Ok((keys.collect(), Token::generate()))
    }

    async fn acquire(&self, (keys, token): &Self::Key, _wait: Duration) -> Result<Option<()>, LockError> {
        let sets = self.conns.iter().zip(keys).map(|(conn, key)| {
            let mut conn = conn.clone();
            async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(token.as_str())
                    .arg("NX")
                    .arg("PX")
                    .arg(self.ttl_ms)
                    .query_async::<Value>(&mut conn)
                    .await
            }
        });
        let votes = futures_util::future::join_all(sets).await;
        let mut acquired = 0;
        for vote in votes {
            if matches!(vote.map_err(raw_error)?, Value::Okay) {
                acquired += 1;
            }
        }
        Ok((acquired >= self.quorum()).then_some(()))
    }

    async fn release(&self, (keys, token): &Self::Key, (): ()) -> Result<bool, LockError> {
        let releases = self.conns.iter().zip(keys).map(|(conn, key)| {
            let mut conn = conn.clone();
            async move {
                redis::cmd("EVALSHA")
                    .arg(&self.release_sha)
                    .arg(1)
                    .arg(key)
                    .arg(token.as_str())
                    .query_async::<i64>(&mut conn)
                    .await
            }
        });
        let votes = futures_util::future::join_all(releases).await;
        let mut released = 0;
        for vote in votes {
            released += usize::from(vote.map_err(raw_error)? == 1);
        }
        Ok(released >= self.quorum())
    }
}

/// Redlock over 3 masters against its floor, one interleaved run.
async fn redlock_floor(single: &RedisServer, masters: &[RedisServer], rounds: usize) {
    let query = "?notifications=false&prefix=floor";
    let single_url = single.url();
    let single_url = single_url.as_str();
    let single = RedisLockStore::connect(&format!("{single_url}{query}")).await.expect("single node");
    let three = RedlockStore::connect(&redlock_url(&masters[..3], query)).await.expect("redlock 3");
    let raw_single = Arc::new(RawFanout::new(vec![single.connection_manager().clone()], false, "floor").await);
    let conns = three.masters().iter().map(|master| master.connection_manager().clone()).collect();
    let raw_three = Arc::new(RawFanout::new(conns, false, "floor").await);
    // The same fan-out to three connections of the one single-node server: the client's
    // and the server's work tripled, without two more server processes to schedule.
    let mut same = Vec::new();
    for _ in 0..3 {
        let client = redis::Client::open(single_url).expect("url");
        same.push(client.get_connection_manager().await.expect("connect"));
    }
    let raw_same = Arc::new(RawFanout::new(same, true, "floor").await);
    let (single, three) = (direct(Arc::new(single)), direct(Arc::new(three)));
    let samples = interleaved_rounds(&[0, 1, 2, 3, 4], rounds, |variant: usize| {
        let (single, three, raw_single, raw_three, raw_same) = (
            Arc::clone(&single),
            Arc::clone(&three),
            Arc::clone(&raw_single),
            Arc::clone(&raw_three),
            Arc::clone(&raw_same),
        );
        async move {
            let prefix = "bench:floor:";
            let stop = Stop::Cycles(CYCLES);
            match variant {
                0 => run(&raw_single, Scenario::Uncontended, prefix, stop).await,
                1 => run(&raw_three, Scenario::Uncontended, prefix, stop).await,
                2 => run(&single, Scenario::Uncontended, prefix, stop).await,
                3 => run(&three, Scenario::Uncontended, prefix, stop).await,
                _ => run(&raw_same, Scenario::Uncontended, prefix, stop).await,
            }
            .expect("cycle");
        }
    })
    .await;
    #[allow(clippy::cast_precision_loss)]
    let medians = report_against_first(
        &format!("Redlock floor: uncontended cycle, 1 task, {CYCLES} cycles/round, no notifications"),
        "µs/cycle",
        CYCLES as f64,
        &[
            "raw single node",
            "raw fan-out, 3 masters",
            "store, single node",
            "redlock store, 3 masters",
            "raw fan-out, 3 conns to 1 master",
        ],
        &samples,
    );
    let ratio = |a: usize, b: usize| {
        let per_round: Vec<f64> = samples[a].iter().zip(&samples[b]).map(|(a, b)| a / b).collect();
        (medians[a] / medians[b], distlock_conformance::kit::bench::median(per_round))
    };
    for (what, a, b) in [
        ("library redlock ÷ library single", 3, 2),
        ("raw fan-out ÷ raw single", 1, 0),
        ("library redlock ÷ raw fan-out", 3, 1),
        ("library single ÷ raw single", 2, 0),
    ] {
        let (of_medians, per_round) = ratio(a, b);
        println!("  {what}: {of_medians:.2}× (median of per-round ratios {per_round:.2}×)");
    }
}

fn main() {
    let rounds = rounds(21);
    let single = RedisServer::start();
    let masters: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    if std::env::var("DISTLOCK_BENCH_ONLY").is_ok_and(|only| only == "redlock") {
        runtime.block_on(redlock_floor(&single, &masters, rounds));
        return;
    }
    let cluster = RedisCluster::start();
    runtime.block_on(on_worker(async move {
        println!("distlock-redis scale-out benchmark: private servers on loopback, {rounds} rounds, median round");
        // A prefix per setting: the stores of one prefix must agree on their settings.
        for (query, label) in [("?prefix=plain", ""), ("?prefix=fenced&fencing=true", ", fencing=true")] {
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
                &format!("uncontended acquire+release through the store, 1 task, {CYCLES} cycles/round{label}"),
                "µs/cycle",
                CYCLES as f64,
                &["single node", "cluster, 3 masters", "redlock, 3 masters", "redlock, 5 masters"],
                &samples,
            );
        }
        redlock_floor(&single, &masters, rounds).await;
    }));
}
