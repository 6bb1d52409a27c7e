//! An owner that survives a restart: a process holding read, write, semaphore and group
//! locks (renewed, 60 s TTL) under its owner id is killed with `kill -9`; started again
//! with the same id (`OwnerId::from_env`), its one start-up call
//! (`LockManager::release_owner`) frees every one of those holds at once, long before
//! their TTL, while another live owner's holds of the same names stay. On Redis,
//! PostgreSQL and etcd through `connect(url)`, each test in a namespace of its own; the
//! memory store cannot be shared between processes, so there the "process" is a runtime
//! of its own that is shut down without releasing anything.
#![cfg(any(feature = "memory", feature = "redis", feature = "postgres", feature = "etcd"))]

use std::time::{Duration, Instant};

use distlock::{GroupLock, GroupMember, LockGroup, LockManager, LockMode, LockOptions, OwnerId};

/// The TTL of every hold: a restart that waited for it would fail the time bounds.
const TTL: Duration = Duration::from_secs(60);
const APP: &str = "owner-restart";

fn read(key: &str) -> LockGroup {
    LockGroup::single(GroupMember::shared(key).unwrap()).unwrap()
}

fn write(key: &str) -> LockGroup {
    LockGroup::single(GroupMember::exclusive(key).unwrap()).unwrap()
}

fn semaphore(key: &str) -> LockGroup {
    LockGroup::single(GroupMember::shared(key).unwrap().with_permits(3)).unwrap()
}

/// `WS2` written and `WS1` read, both or neither.
fn deploy() -> LockGroup {
    LockGroup::new([GroupMember::exclusive("WS2").unwrap(), GroupMember::shared("WS1").unwrap()]).unwrap()
}

/// What the dying process holds: a read lock, a write lock, a semaphore slot and a group
/// of two names — five holds.
fn dying_holds() -> [LockGroup; 4] {
    [read("report"), write("ledger"), semaphore("exports"), deploy()]
}
const DYING_HOLDS: u64 = 5;

/// What the live owner holds beside them: the shared names only.
fn live_holds() -> [LockGroup; 3] {
    [read("report"), semaphore("exports"), read("WS1")]
}

async fn take_all(locks: &LockManager, groups: &[LockGroup]) -> Vec<GroupLock> {
    let options = LockOptions::new().auto_renew();
    let mut held = Vec::new();
    for group in groups {
        let lock = locks.try_lock_group_opts(group, TTL, &options).await.unwrap();
        held.push(lock.unwrap_or_else(|| panic!("{group:?} is held elsewhere")));
    }
    held
}

/// Every holder of the test's names: `(name, mode, owner)`, sorted.
async fn holders(locks: &LockManager) -> Vec<(&'static str, LockMode, String)> {
    let mut all = Vec::new();
    for name in ["report", "ledger", "exports", "WS2", "WS1"] {
        for holder in locks.holders(name).await.unwrap() {
            all.push((name, holder.mode, holder.owner.unwrap_or_default()));
        }
    }
    all.sort_by(|a, b| (a.0, a.2.as_str()).cmp(&(b.0, b.2.as_str())));
    all
}

/// The holders while both owners hold (`dying` then only `live` once it is gone).
fn expected(live: &OwnerId, dying: Option<&OwnerId>) -> Vec<(&'static str, LockMode, String)> {
    let (shared, exclusive) = (LockMode::Shared, LockMode::Exclusive);
    let mut all = vec![("report", shared, live), ("exports", shared, live), ("WS1", shared, live)];
    if let Some(dying) = dying {
        all.extend([
            ("report", shared, dying),
            ("ledger", exclusive, dying),
            ("exports", shared, dying),
            ("WS2", exclusive, dying),
            ("WS1", shared, dying),
        ]);
    }
    let mut all: Vec<_> = all.into_iter().map(|(name, mode, owner)| (name, mode, owner.as_str().to_owned())).collect();
    all.sort_by(|a, b| (a.0, a.2.as_str()).cmp(&(b.0, b.2.as_str())));
    all
}

/// A store URL with a namespace of its own (a Redis or etcd key prefix, a PostgreSQL
/// schema).
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
fn private_url(base: &str, name: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    if base.starts_with("redis") {
        format!("{base}{separator}prefix={name}:")
    } else if base.starts_with("etcd") {
        format!("{base}{separator}prefix={name}")
    } else {
        format!("{base}{separator}schema={name}&create=true")
    }
}

fn unique(what: &str) -> String {
    format!("{what}_{}", &distlock::Token::generate().as_str().replace('-', "")[..12])
}

#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
mod processes {
    use distlock_conformance::kit::child::{self, ChildProcess};

    use super::*;

    /// A child's argument: its instance name and the store's URL.
    fn child_arg(instance: &str, url: &str) -> String {
        format!("{instance} {url}")
    }

    /// A child's manager: the instance name goes to `DISTLOCK_INSTANCE` (set before the
    /// child's runtime starts), as a deployment would set it, and the owner is read back
    /// with `OwnerId::from_env`.
    fn child_manager(arg: &str) -> (tokio::runtime::Runtime, LockManager) {
        let (instance, url) = arg.split_once(' ').expect("instance and url");
        std::env::set_var(OwnerId::INSTANCE_VAR, instance);
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let owner = OwnerId::from_env(APP).unwrap();
        let locks =
            runtime.block_on(async { LockManager::new(distlock::connect(url).await.unwrap()).with_owner(owner) });
        (runtime, locks)
    }

    /// The first run: takes every hold (renewed), says so, waits to be killed.
    #[test]
    fn child_entry_holds_as_its_owner() {
        let Some(arg) = child::role_arg("holder") else { return };
        let (runtime, locks) = child_manager(&arg);
        runtime.block_on(async {
            let held = take_all(&locks, &dying_holds()).await;
            child::announce(&format!("HOLDING {}", held.len()));
            child::park().await;
        });
    }

    /// The second run, same owner: the start-up call, then it reports how many holds it freed.
    #[test]
    fn child_entry_restarts_as_its_owner() {
        let Some(arg) = child::role_arg("restart") else { return };
        let (runtime, locks) = child_manager(&arg);
        runtime.block_on(async {
            let freed = locks.release_owner().await.unwrap();
            child::announce(&format!("FREED {freed}"));
            child::park().await;
        });
    }

    pub(super) fn killed_owner_is_freed_by_its_restart(base: &str) {
        let url = private_url(base, &unique("restart"));
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let live_owner = OwnerId::new(APP, &unique("live")).unwrap();
        let locks = runtime.block_on(async {
            LockManager::new(distlock::connect(&url).await.unwrap()).with_owner(live_owner.clone())
        });
        let mine = runtime.block_on(take_all(&locks, &live_holds()));

        let instance = unique("replica");
        let dying_owner = OwnerId::new(APP, &instance).unwrap();
        let arg = child_arg(&instance, &url);
        let mut first = ChildProcess::spawn("owner_restart::processes::child_entry_holds_as_its_owner", "holder", &arg);
        first.wait_for_line("HOLDING 4", Duration::from_secs(60));
        runtime.block_on(async {
            assert_eq!(holders(&locks).await, expected(&live_owner, Some(&dying_owner)));
        });
        first.kill9();
        let killed_at = Instant::now();
        // Nothing renews the dead run's holds now, but their TTL is far away.
        runtime.block_on(async {
            assert_eq!(holders(&locks).await, expected(&live_owner, Some(&dying_owner)), "gone before the restart");
        });

        let mut second =
            ChildProcess::spawn("owner_restart::processes::child_entry_restarts_as_its_owner", "restart", &arg);
        let line = second.wait_for_line("FREED ", Duration::from_secs(60));
        assert_eq!(line.trim(), format!("FREED {DYING_HOLDS}"));
        runtime.block_on(async {
            // Every hold of the dead run is gone at once; the live owner's all stay.
            assert_eq!(holders(&locks).await, expected(&live_owner, None));
            assert!(killed_at.elapsed() < TTL / 2, "the restart took {:?}", killed_at.elapsed());
            assert!(mine.iter().all(|lock| !lock.is_lost()), "the live owner lost a hold");
            // The names the dead run wrote are free now, long before their TTL.
            for group in [write("ledger"), LockGroup::single(GroupMember::exclusive("WS2").unwrap()).unwrap()] {
                let lock = locks.try_lock_group(&group, TTL).await.unwrap();
                lock.unwrap_or_else(|| panic!("{group:?} still held after the restart")).release().await.unwrap();
            }
            for lock in mine {
                lock.release().await.unwrap();
            }
            assert!(holders(&locks).await.is_empty());
            assert_eq!(locks.release_owner_of(&dying_owner).await.unwrap(), 0);
        });
    }
}

#[cfg(feature = "redis")]
#[test]
fn redis_killed_owner_is_freed_by_its_restart() {
    let Some(url) = distlock_conformance::kit::redis_url("owner restart on redis") else { return };
    processes::killed_owner_is_freed_by_its_restart(&url);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_killed_owner_is_freed_by_its_restart() {
    let Some(url) = distlock_conformance::kit::postgres_url("owner restart on postgres") else { return };
    processes::killed_owner_is_freed_by_its_restart(&url);
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_killed_owner_is_freed_by_its_restart() {
    let Some(url) = distlock_conformance::kit::etcd_url("owner restart on etcd") else { return };
    processes::killed_owner_is_freed_by_its_restart(&url);
}

/// The memory store lives in one process: the dying "process" is a runtime of its own
/// whose handles are never dropped and whose renewal tasks stop with it — as `kill -9`
/// leaves them — and the restart is a new manager with the same owner.
#[cfg(feature = "memory")]
#[test]
fn memory_crashed_owner_is_freed_by_its_restart() {
    let store: std::sync::Arc<distlock::DynLockStore> = std::sync::Arc::new(distlock::memory::MemoryLockStore::new());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let live_owner = OwnerId::new(APP, &unique("live")).unwrap();
    let dying_owner = OwnerId::new(APP, &unique("replica")).unwrap();
    let locks = LockManager::new(std::sync::Arc::clone(&store)).with_owner(live_owner.clone());
    let mine = runtime.block_on(take_all(&locks, &live_holds()));

    let dying = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let first_run = LockManager::new(std::sync::Arc::clone(&store)).with_owner(dying_owner.clone());
    let held = dying.block_on(take_all(&first_run, &dying_holds()));
    assert!(held.iter().all(GroupLock::is_renewing));
    // The crash: no handle is dropped (nothing is released), the renewal tasks die.
    std::mem::forget(held);
    drop(first_run);
    dying.shutdown_background();
    let crashed_at = Instant::now();

    runtime.block_on(async {
        assert_eq!(holders(&locks).await, expected(&live_owner, Some(&dying_owner)), "gone before the restart");
        let restarted = LockManager::new(std::sync::Arc::clone(&store)).with_owner(dying_owner.clone());
        assert_eq!(restarted.release_owner().await.unwrap(), DYING_HOLDS);
        assert_eq!(holders(&locks).await, expected(&live_owner, None));
        assert!(crashed_at.elapsed() < TTL / 2);
        assert!(mine.iter().all(|lock| !lock.is_lost()), "the live owner lost a hold");
        let ledger = restarted.try_lock_group(&write("ledger"), TTL).await.unwrap().expect("free after the restart");
        ledger.release().await.unwrap();
        for lock in mine {
            lock.release().await.unwrap();
        }
        assert!(holders(&locks).await.is_empty());
    });
}

/// Without `DISTLOCK_INSTANCE` there is no owner from the environment: a typed error, not
/// a guess that two live processes could share. (Only this test of this binary's
/// parent process touches the variable.)
#[test]
fn owner_from_env_needs_the_instance_variable() {
    if std::env::var(OwnerId::INSTANCE_VAR).is_ok() {
        return; // a child process, or a caller that set it: nothing to check here
    }
    match OwnerId::from_env(APP) {
        Err(distlock::LockError::InvalidGroup { reason: distlock::InvalidGroup::OwnerInstanceUnset { var } }) => {
            assert_eq!(var, "DISTLOCK_INSTANCE");
        }
        other => panic!("expected OwnerInstanceUnset, got {other:?}"),
    }
    assert!(matches!(OwnerId::new(APP, "bad name"), Err(distlock::LockError::InvalidGroup { .. })));
}
