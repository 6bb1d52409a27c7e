//! etcd store benchmark, each scenario beside the same etcd requests sent raw with
//! `etcd-client`, in one run.
//!
//! ```text
//! cargo bench -p distlock-etcd                     # starts a private one-node etcd
//! DISTLOCK_ETCD_URL=etcd://127.0.0.1:2379 cargo bench -p distlock-etcd
//! DISTLOCK_BENCH_ROUNDS=5 cargo bench -p distlock-etcd   # fewer rounds
//! cargo bench -p distlock-etcd -- groups             # lock groups only
//! cargo bench -p distlock-etcd -- locks              # the uncontended and distinct-key cycles only
//! ```
//!
//! - uncontended: one acquire + release cycle, one task:
//!   - `raw`: `LeaseGrant(30)` + `Txn If CreateRevision(key) = 0 ∧ queue empty Then
//!     Put(key, token, lease) Else Get(key)`, then `Txn If Value(key) = token Then
//!     Delete(key) ∧ Delete(place) Else Delete(place)` and a background `LeaseRevoke`,
//!     sent with `etcd-client` on the store's client: a lease per acquisition, as a
//!     client without the store's reuse of released leases sends them (the store sends
//!     the same transactions, on a released lease kept alive beside the first);
//!   - `store`: `EtcdLockStore::try_acquire` + `release` (fixed token);
//!   - `manager`: `LockManager::try_lock` + `DistributedLock::release`.
//! - distinct: 8 tasks, each cycling its own key, same three variants.
//! - hand-off: one hot key, 8 waiters, hold 0, retry interval 50 ms: release → next
//!   holder latency (p50/p99), woken by the watch vs polling only, and the p50 in round
//!   trips of the store (one `inspect` of an absent key, measured in each round).
//! - lock groups (`kit::group_bench`, through the manager): a two-name group cycle and a
//!   read-lock cycle beside a single-key lock cycle, readers' vs writers' throughput on
//!   one name, and a writer's wait among continuous readers.
//! - leader election (`kit::bench::election`, `cargo bench -p distlock-etcd -- election`
//!   for it alone): graceful hand-over, observer lag and failover after `kill -9` of the
//!   leader's process (TTL 2 s), `distlock-election` beside etcd's own election
//!   (`etcdctl elect`: the Election service's Campaign, Resign and Observe, through
//!   `etcd-client`, on a lease of the same TTL kept alive every third of it).
//!
//! Keys live under a random prefix and are all released.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockError, LockKey, Token};
use distlock_conformance::kit::bench::election::{
    self, BoxFuture, Candidate, ChildSpec, Plan as ElectionPlan, Side, Watch,
};
use distlock_conformance::kit::bench::{on_worker, rounds, Locker, Scenario, SideBySide, Unit};
use distlock_conformance::kit::etcd_server::EtcdCluster;
use distlock_conformance::kit::group_bench::{self, GroupPlan};
use distlock_conformance::kit::handoff::{self, Plan};
use distlock_etcd::etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, LeaderKey, ObserveStream, PutOptions, ResignOptions, Txn, TxnOp,
    TxnOpResponse,
};
use distlock_etcd::EtcdLockStore;

const CYCLES: u64 = 500;
const TASKS: usize = 8;
const TASK_CYCLES: u64 = 100;
const TTL: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_millis(50);

/// The store's requests, sent raw.
#[derive(Clone)]
struct RawEtcd {
    client: Client,
    prefix: String,
}

impl std::fmt::Debug for RawEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawEtcd").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

fn failed(operation: &'static str, err: distlock_etcd::etcd_client::Error) -> LockError {
    LockError::store("etcd", operation, None, err)
}

impl Locker for RawEtcd {
    /// (the lock's etcd key, its queue prefix, this worker's token)
    type Key = (String, String, Token);
    type Guard = ();

    fn key(&self, name: &str) -> Result<Self::Key, LockError> {
        let key = LockKey::new(name)?.to_store_key();
        let lock = format!("{}/{}", self.prefix, key.as_str());
        let queue = format!("{}/queue/{}\u{1f}", self.prefix, key.as_str());
        Ok((lock, queue, Token::generate()))
    }

    async fn acquire(&self, (lock, queue, token): &Self::Key, wait: Duration) -> Result<Option<()>, LockError> {
        assert!(wait.is_zero(), "the raw variant runs the uncontended scenarios only");
        let mut leases = self.client.lease_client();
        let lease = leases.grant(TTL.as_secs().try_into().unwrap(), None).await.map_err(|e| failed("acquire", e))?.id();
        let txn = Txn::new()
            .when([
                Compare::create_revision(lock.clone(), CompareOp::Equal, 0),
                Compare::create_revision(queue.clone(), CompareOp::Equal, 0).with_prefix(),
            ])
            .and_then([TxnOp::put(lock.clone(), token.as_str(), Some(PutOptions::new().with_lease(lease)))])
            .or_else([TxnOp::get(lock.clone(), None)]);
        let answer = self.client.kv_client().txn(txn).await.map_err(|e| failed("acquire", e))?;
        Ok(answer.succeeded().then_some(()))
    }

    async fn release(&self, (lock, queue, token): &Self::Key, (): ()) -> Result<bool, LockError> {
        let place = format!("{queue}{}", token.as_str());
        let leave = || TxnOp::delete(place.clone(), Some(DeleteOptions::new().with_prev_key()));
        let txn = Txn::new()
            .when([Compare::value(lock.clone(), CompareOp::Equal, token.as_str())])
            .and_then([TxnOp::delete(lock.clone(), Some(DeleteOptions::new().with_prev_key())), leave()])
            .or_else([leave()]);
        let answer = self.client.kv_client().txn(txn).await.map_err(|e| failed("release", e))?;
        for op in answer.op_responses() {
            if let TxnOpResponse::Delete(deleted) = op {
                for prev in deleted.prev_kvs() {
                    let (mut leases, lease) = (self.client.lease_client(), prev.lease());
                    tokio::spawn(async move { leases.revoke(lease).await });
                }
            }
        }
        Ok(answer.succeeded())
    }
}

fn main() {
    if let Some(spec) = election::leader_child() {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
        runtime.block_on(on_worker(async move {
            let (url, prefix) = spec.store.split_once(' ').expect("`URL PREFIX`");
            if spec.role == "etcd" {
                election::lead_until_killed(&EtcdCandidate::connect(url, &spec.name, ElectionPlan::TTL).await).await
            }
            election::lead_distlock_until_killed(election_store(url, prefix).await, &spec, ElectionPlan::TTL).await
        }));
    }
    let private = match std::env::var("DISTLOCK_ETCD_URL") {
        Ok(url) if !url.is_empty() => None,
        _ => Some(EtcdCluster::start(1)),
    };
    let url = private.as_ref().map_or_else(|| std::env::var("DISTLOCK_ETCD_URL").unwrap(), EtcdCluster::url);
    let rounds = rounds(11);
    let only_groups = std::env::args().skip(1).any(|arg| arg == "groups");
    let only_election = std::env::args().skip(1).any(|arg| arg == "election");
    // `-- handoff` runs the two hand-off comparisons only.
    let only_hand_off = std::env::args().skip(1).any(|arg| arg == "handoff");
    // `-- locks` runs the uncontended and distinct-key cycles only.
    let only_locks = std::env::args().skip(1).any(|arg| arg == "locks");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(on_worker(async move {
        let prefix = format!("dlbench-{}", Token::generate().as_str());
        let store = EtcdLockStore::builder().key_prefix(&prefix).connect(&url).await.expect("connect");
        let raw = RawEtcd { client: store.client().clone(), prefix: prefix.clone() };
        let store: Arc<DynLockStore> = Arc::new(store);
        let bench = SideBySide::new(raw, Arc::clone(&store), TTL, RETRY, "bench:").expect("bench");
        println!("distlock-etcd benchmark against {url} (etcd {}): {rounds} rounds, median round", server_version());
        if only_groups {
            groups(store, rounds).await;
            return;
        }
        if only_election {
            elections(&url, &prefix).await;
            return;
        }
        if !only_hand_off {
            let title =
                format!("uncontended acquire+release, 1 task, {CYCLES} cycles/round, taking turns cycle by cycle");
            bench.compare_turns(&title, CYCLES, 1, rounds, Unit::CYCLE).await;
            let title = format!("distinct keys, {TASKS} tasks × {TASK_CYCLES} cycles/round (wall time)");
            bench.compare(&title, Scenario::Distinct { workers: TASKS }, TASK_CYCLES, rounds, Unit::CYCLE).await;
        }
        if only_locks {
            return;
        }
        let plan = Plan {
            waiters: TASKS,
            retry: RETRY,
            notified_sections: 1_000,
            polling_sections: 100,
            rounds: 3,
            round_trips: true,
        };
        handoff::compare(Arc::clone(&store), "", "bench:handoff:", plan).await;
        let plan = Plan {
            waiters: 2,
            retry: RETRY,
            notified_sections: 1_000,
            polling_sections: 100,
            rounds: 3,
            round_trips: true,
        };
        handoff::compare(Arc::clone(&store), "one watching waiter: ", "bench:handoff1:", plan).await;
        if only_hand_off {
            return;
        }
        groups(store, rounds).await;
        elections(&url, &prefix).await;
    }));
}

/// A store on a connection of its own, for one participant of an election.
async fn election_store(url: &str, prefix: &str) -> Arc<DynLockStore> {
    Arc::new(EtcdLockStore::builder().key_prefix(prefix).connect(url).await.expect("connect"))
}

/// distlock's election beside etcd's own, on the same etcd.
async fn elections(url: &str, prefix: &str) {
    let name = format!("bench-{}", &Token::generate().as_str()[..8]);
    let store = format!("{url} {prefix}");
    let etcd_name = format!("{prefix}/etcd-election/{name}");
    let etcd = Side {
        name: "etcd election".to_owned(),
        candidates: [
            Arc::new(EtcdCandidate::connect(url, &etcd_name, ElectionPlan::TTL).await),
            Arc::new(EtcdCandidate::connect(url, &etcd_name, ElectionPlan::TTL).await),
        ],
        watch: Box::new(EtcdWatch::connect(url, &etcd_name).await),
        child: Some(ChildSpec { role: "etcd".to_owned(), name: etcd_name.clone(), store: store.clone() }),
    };
    let distlock = election::distlock_side(&name, ElectionPlan::TTL, Some(store), || election_store(url, prefix)).await;
    election::compare("", vec![etcd, distlock], ElectionPlan::standard()).await;
}

/// A candidate of etcd's own election (what `etcdctl elect` does): a lease of the TTL kept
/// alive every third of it, `Campaign` on it, `Resign`, then the lease revoked.
struct EtcdCandidate {
    client: Client,
    name: String,
    ttl: Duration,
    lead: tokio::sync::Mutex<Option<(LeaderKey, tokio::task::JoinHandle<()>)>>,
}

impl EtcdCandidate {
    async fn connect(url: &str, name: &str, ttl: Duration) -> Self {
        let client = etcd_client(url).await;
        Self { client, name: name.to_owned(), ttl, lead: tokio::sync::Mutex::new(None) }
    }
}

impl Candidate for EtcdCandidate {
    fn campaign<'a>(&'a self, value: &'a str) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(async move {
            let mut leases = self.client.lease_client();
            let lease = leases
                .grant(self.ttl.as_secs().try_into().unwrap(), None)
                .await
                .map_err(|e| failed("campaign", e))?
                .id();
            let (mut keeper, mut answers) = leases.keep_alive(lease).await.map_err(|e| failed("campaign", e))?;
            let every = self.ttl / 3;
            let keep_alive = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    if keeper.keep_alive().await.is_err() || answers.message().await.is_err() {
                        return;
                    }
                }
            });
            let answer = self.client.election_client().campaign(self.name.as_str(), value, lease).await;
            let leader = match answer {
                Ok(mut answer) => answer.take_leader().expect("a campaign's leader key"),
                Err(error) => {
                    keep_alive.abort();
                    return Err(failed("campaign", error));
                }
            };
            let term = u64::try_from(leader.rev()).unwrap_or_default();
            *self.lead.lock().await = Some((leader, keep_alive));
            Ok(term)
        })
    }

    fn resign(&self) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(async move {
            let Some((leader, keep_alive)) = self.lead.lock().await.take() else { return Ok(()) };
            let lease = leader.lease();
            self.client
                .election_client()
                .resign(Some(ResignOptions::new().with_leader(leader)))
                .await
                .map_err(|e| failed("resign", e))?;
            keep_alive.abort();
            let mut leases = self.client.lease_client();
            tokio::spawn(async move { leases.revoke(lease).await });
            Ok(())
        })
    }
}

/// A client of its own for the endpoints of the store URL `url`.
async fn etcd_client(url: &str) -> Client {
    let hosts = url.trim_start_matches("etcd://").split(['/', '?']).next().unwrap_or_default();
    Client::connect(hosts.split(',').collect::<Vec<_>>(), None).await.expect("connect to etcd")
}

/// An observer of etcd's own election: its `Observe` stream.
struct EtcdWatch {
    client: Client,
    name: String,
    stream: Option<ObserveStream>,
}

impl EtcdWatch {
    async fn connect(url: &str, name: &str) -> Self {
        let client = etcd_client(url).await;
        Self { client, name: name.to_owned(), stream: None }
    }
}

impl Watch for EtcdWatch {
    fn changed(&mut self) -> BoxFuture<'_, Result<Option<u64>, LockError>> {
        Box::pin(async move {
            if self.stream.is_none() {
                let stream = self.client.election_client().observe(self.name.as_str()).await;
                self.stream = Some(stream.map_err(|e| failed("observe", e))?);
            }
            let stream = self.stream.as_mut().expect("just opened");
            match stream.message().await {
                Ok(Some(answer)) => Ok(answer.kv().map(|kv| u64::try_from(kv.create_revision()).unwrap_or_default())),
                Ok(None) => {
                    self.stream = None;
                    Err(LockError::store("etcd", "observe", None, std::io::Error::other("the stream ended")))
                }
                Err(error) => {
                    self.stream = None;
                    Err(failed("observe", error))
                }
            }
        })
    }
}

async fn groups(store: Arc<DynLockStore>, rounds: usize) {
    println!("lock groups:");
    let plan = GroupPlan {
        cycles: 200,
        rounds,
        hold: Duration::from_millis(5),
        hot_cycles: 20,
        writer_samples: 50,
        longer_holds: &[],
    };
    group_bench::compare(store, "bench:groups:", plan).await;
}

fn server_version() -> String {
    std::process::Command::new("etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.lines().next().map(|line| line.trim_start_matches("etcd Version: ").to_owned()))
        .unwrap_or_else(|| "?".to_owned())
}
