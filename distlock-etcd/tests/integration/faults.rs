//! Real faults against private etcd servers started by the test kit: a three-member
//! cluster on loopback whose leader is killed (`kill -9`) or stopped (`SIGSTOP`) while
//! locks are held and contended; a network cut between a holder and its server (the
//! kit's fault proxy); and a holding process killed with `kill -9`.
//!
//! Every test counts its trials and prints them (`cargo nextest run … --no-capture`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_api::{DynLockStore, LockError, LockManager, LockOptions, LossReason};
use distlock_conformance::kit::child::{self, ChildProcess};
use distlock_conformance::kit::etcd_server::EtcdCluster;
use distlock_conformance::kit::proxy::FaultProxy;
use distlock_etcd::EtcdLockStore;
use tokio::time::Instant;

fn unique_prefix(test: &str) -> String {
    format!("faults-{test}-{}", std::process::id())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap()
}

async fn store(url: &str, prefix: &str, timeout: Duration) -> EtcdLockStore {
    EtcdLockStore::builder().key_prefix(prefix).response_timeout(timeout).connect(url).await.expect("connect")
}

/// What the contending workers saw.
#[derive(Debug, Default)]
struct Tally {
    acquired: AtomicU64,
    busy: AtomicU64,
    errors: AtomicU64,
    overlaps: AtomicU64,
    fences_backwards: AtomicU64,
}

/// Per key: whether someone is inside, and the last fence seen inside.
#[derive(Debug, Default)]
struct KeyState {
    inside: AtomicBool,
    last_fence: Mutex<u64>,
}

const KEYS: usize = 2;
const WORKERS_PER_STORE: usize = 2;

/// Starts workers contending for `KEYS` keys through one store per cluster member list
/// (three clients), until `stop` is set.
fn start_workers(
    stores: &[Arc<DynLockStore>],
    tally: &Arc<Tally>,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let keys: Arc<HashMap<String, KeyState>> =
        Arc::new((0..KEYS).map(|i| (format!("job:{i}"), KeyState::default())).collect());
    let mut workers = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        for w in 0..WORKERS_PER_STORE {
            let locks = LockManager::new(Arc::clone(store));
            let (tally, stop, keys) = (Arc::clone(tally), Arc::clone(stop), Arc::clone(&keys));
            let name = format!("job:{}", (s + w) % KEYS);
            workers.push(tokio::spawn(async move {
                let options = LockOptions::new().wait(Duration::from_secs(1)).retry_interval(Duration::from_millis(20));
                let state = &keys[&name];
                while !stop.load(Ordering::SeqCst) {
                    match locks.lock_opts(&name, Duration::from_secs(3), &options).await {
                        Ok(lock) => {
                            if state.inside.swap(true, Ordering::SeqCst) {
                                tally.overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            let fence = lock.fence().expect("etcd always fences");
                            {
                                let mut last = state.last_fence.lock().unwrap();
                                if fence <= *last {
                                    tally.fences_backwards.fetch_add(1, Ordering::SeqCst);
                                }
                                *last = fence;
                            }
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            state.inside.store(false, Ordering::SeqCst);
                            tally.acquired.fetch_add(1, Ordering::SeqCst);
                            if lock.release().await.is_err() {
                                tally.errors.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(err) if err.is_not_acquired() => {
                            tally.busy.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(_) => {
                            tally.errors.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }));
        }
    }
    workers
}

/// Waits until `count` more acquisitions than `from` have happened; returns how long it took.
async fn resumed(tally: &Tally, from: u64, count: u64, within: Duration) -> Duration {
    let started = Instant::now();
    while tally.acquired.load(Ordering::SeqCst) < from + count {
        assert!(started.elapsed() < within, "operations did not resume within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    started.elapsed()
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    KillLeader,
    StopLeader,
}

/// Runs `trials` faults of one kind on the leader of a three-member cluster while six
/// workers contend for two keys; checks that no key ever has two holders, fences never
/// go backwards, and operations resume after each fault.
fn contend_through(fault: Fault, trials: usize) {
    let test = format!("etcd {fault:?} while contended");
    let Some(mut cluster) = EtcdCluster::start_or_skip(&test, 3) else { return };
    let runtime = runtime();
    let prefix = unique_prefix(&format!("{fault:?}"));
    let stores: Vec<Arc<DynLockStore>> = runtime.block_on(async {
        let mut stores: Vec<Arc<DynLockStore>> = Vec::new();
        for _ in 0..3 {
            stores.push(Arc::new(store(&cluster.url(), &prefix, Duration::from_secs(2)).await));
        }
        stores
    });
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let workers = runtime.block_on(async { start_workers(&stores, &tally, &stop) });
    let mut resume_times = Vec::new();
    for trial in 0..trials {
        runtime.block_on(resumed(&tally, tally.acquired.load(Ordering::SeqCst), 20, Duration::from_secs(30)));
        let leader = cluster.wait_for_leader(Duration::from_secs(15));
        let before = tally.acquired.load(Ordering::SeqCst);
        let faulted_at = std::time::Instant::now();
        match fault {
            Fault::KillLeader => cluster.kill(leader),
            Fault::StopLeader => cluster.pause(leader),
        }
        let next = cluster.wait_for_leader(Duration::from_secs(15));
        assert_ne!(next, leader, "trial {trial}: the faulty member is still leader");
        let elected = faulted_at.elapsed();
        // Operations resume while the old leader is still down (killed) or stopped.
        let resume = runtime.block_on(resumed(&tally, before, 10, Duration::from_secs(30)));
        let resumed_after = faulted_at.elapsed().max(resume);
        match fault {
            Fault::KillLeader => cluster.restart(leader),
            Fault::StopLeader => {
                // Well past the election timeout, as a long GC pause or a stalled VM.
                std::thread::sleep(Duration::from_millis(1500).saturating_sub(faulted_at.elapsed()));
                cluster.resume(leader);
            }
        }
        eprintln!("trial {trial}: {fault:?} of member {leader}: new leader {next} after {elected:?}, 10 acquisitions after {resumed_after:?}");
        resume_times.push(resumed_after);
    }
    runtime.block_on(resumed(&tally, tally.acquired.load(Ordering::SeqCst), 20, Duration::from_secs(30)));
    stop.store(true, Ordering::SeqCst);
    runtime.block_on(async {
        for worker in workers {
            worker.await.unwrap();
        }
    });
    let (acquired, busy, errors) =
        (tally.acquired.load(Ordering::SeqCst), tally.busy.load(Ordering::SeqCst), tally.errors.load(Ordering::SeqCst));
    eprintln!(
        "{fault:?}: {trials} trials, {acquired} acquisitions, {busy} timed-out waits, {errors} store errors, \
         {} overlaps, {} fences backwards; resumed after {resume_times:?}",
        tally.overlaps.load(Ordering::SeqCst),
        tally.fences_backwards.load(Ordering::SeqCst),
    );
    assert_eq!(tally.overlaps.load(Ordering::SeqCst), 0, "a key had two holders");
    assert_eq!(tally.fences_backwards.load(Ordering::SeqCst), 0, "a fence went backwards");
    assert!(acquired > 0);
}

/// `kill -9` of the leader while locks are held and contended.
#[test]
fn leader_kill9_while_locks_are_held_and_contended() {
    contend_through(Fault::KillLeader, 3);
}

/// `SIGSTOP` of the leader past the election timeout, then `SIGCONT`.
#[test]
fn leader_sigstop_past_the_election_timeout() {
    contend_through(Fault::StopLeader, 2);
}

/// A network cut between a renewing holder and etcd fires `lost()` before another
/// client, still connected, can take the key.
#[test]
fn network_cut_fires_lost_before_another_client_acquires() {
    const TRIALS: usize = 3;
    let Some(cluster) = EtcdCluster::start_or_skip("etcd network cut", 1) else { return };
    runtime().block_on(async {
        let prefix = unique_prefix("cut");
        let upstream = cluster.client_addr(0);
        let mut margins = Vec::new();
        for trial in 0..TRIALS {
            let proxy = FaultProxy::start(upstream).await.unwrap();
            let via_proxy = Arc::new(store(&format!("etcd://{}", proxy.addr()), &prefix, Duration::from_secs(1)).await);
            let direct: Arc<DynLockStore> = Arc::new(store(&cluster.url(), &prefix, Duration::from_secs(2)).await);
            let key = format!("cut:{trial}");
            let holder = LockManager::new(via_proxy);
            let ttl = Duration::from_secs(3);
            let held = holder.lock_opts(&key, ttl, &LockOptions::new().auto_renew()).await.unwrap();
            proxy.pause();
            let cut_at = Instant::now();
            let rival = tokio::spawn({
                let (locks, key) = (LockManager::new(Arc::clone(&direct)), key.clone());
                async move {
                    let options =
                        LockOptions::new().wait(Duration::from_secs(20)).retry_interval(Duration::from_millis(50));
                    let lock = locks.lock_opts(&key, ttl, &options).await?;
                    let at = Instant::now();
                    lock.release().await?;
                    Ok::<_, LockError>(at)
                }
            });
            let reason = tokio::time::timeout(Duration::from_secs(20), held.lost()).await.expect("lost did not fire");
            let lost_at = Instant::now();
            assert_eq!(reason, LossReason::DeadlinePassed);
            let acquired_at = rival.await.unwrap().expect("the rival gets the key after the lease ends");
            assert!(lost_at < acquired_at, "trial {trial}: another client acquired before lost() fired");
            eprintln!(
                "trial {trial}: lost() {:?} after the cut, the rival acquired {:?} after lost()",
                lost_at - cut_at,
                acquired_at - lost_at
            );
            margins.push(acquired_at - lost_at);
            proxy.resume();
        }
        eprintln!("network cut: {TRIALS} trials, lost() ahead of the next holder by {margins:?}");
    });
}

/// The conformance suite's partition case, on etcd through the fault proxy.
#[test]
fn partition_fires_lost_before_the_ttl() {
    let Some(cluster) = EtcdCluster::start_or_skip("etcd partition", 1) else { return };
    runtime().block_on(async {
        let prefix = unique_prefix("partition");
        let proxy = FaultProxy::start(cluster.client_addr(0)).await.unwrap();
        let via_proxy: Arc<DynLockStore> =
            Arc::new(store(&format!("etcd://{}", proxy.addr()), &prefix, Duration::from_secs(1)).await);
        let direct: Arc<DynLockStore> = Arc::new(store(&cluster.url(), &prefix, Duration::from_secs(2)).await);
        distlock_conformance::cases::partition_fires_lost_before_the_ttl(via_proxy, &proxy, direct).await;
    });
}

const HOLDER_TTL: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread")]
async fn child_entry_holds_etcd_lock() {
    let Some(arg) = child::role_arg("etcd-holder") else { return };
    let mut parts = arg.split(' ');
    let (Some(url), Some(prefix), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("bad child argument {arg:?}")
    };
    let store = store(url, prefix, Duration::from_secs(5)).await;
    let locks = LockManager::new(Arc::new(store));
    let lock = locks.try_lock(key, HOLDER_TTL).await.unwrap().expect("the child takes the lock");
    child::announce(&format!("ACQUIRED {}", lock.token().as_str()));
    child::park().await;
}

/// `kill -9` of a holding process frees its key within the TTL plus the server's
/// lease-expiry delay (etcd checks expiry about every 500 ms), and not before the TTL.
#[test]
fn killed_holder_frees_its_key_within_ttl_and_expiry_delay() {
    const TRIALS: usize = 3;
    let Some(cluster) = EtcdCluster::start_or_skip("etcd kill -9 of a holder", 1) else { return };
    let prefix = unique_prefix("kill9");
    let runtime = runtime();
    let store: Arc<DynLockStore> = Arc::new(runtime.block_on(store(&cluster.url(), &prefix, Duration::from_secs(2))));
    let locks = LockManager::new(store);
    let mut waits = Vec::new();
    for trial in 0..TRIALS {
        let key = format!("job:{trial}");
        let arg = format!("{} {prefix} {key}", cluster.url());
        let mut holder = ChildProcess::spawn("faults::child_entry_holds_etcd_lock", "etcd-holder", &arg);
        holder.wait_for_line("ACQUIRED ", Duration::from_secs(60));
        holder.kill9();
        let killed_at = Instant::now();
        runtime.block_on(async {
            // A long retry interval: the waiter wakes on the watch's delete (lease expiry).
            let options = LockOptions::new().wait(Duration::from_secs(10)).retry_interval(Duration::from_secs(2));
            let lock = locks.lock_opts(&key, Duration::from_secs(5), &options).await.expect("freed after the TTL");
            let freed = killed_at.elapsed();
            lock.release().await.unwrap();
            assert!(freed <= HOLDER_TTL + Duration::from_millis(1500), "{key}: freed only after {freed:?}");
            waits.push(freed);
        });
    }
    eprintln!("kill -9 of a holder ({HOLDER_TTL:?} TTL): {TRIALS} trials, freed after {waits:?}");
}
