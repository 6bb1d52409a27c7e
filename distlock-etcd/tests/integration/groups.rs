//! Lock groups on etcd beyond the shared suite: the etcd behaviour the grant's guard
//! relies on, and overlapping groups racing on a few names (every grant decided on a
//! read and committed by a guarded transaction) against the real etcd at
//! `DISTLOCK_ETCD_URL`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{GroupMember, LockGroup, LockManager, LockMode, LockOptions, Token};
use distlock_etcd::etcd_client::{Compare, CompareOp, Txn, TxnOp};
use distlock_etcd::EtcdLockStore;

async fn store(test: &str) -> Option<EtcdLockStore> {
    let url = distlock_conformance::kit::etcd_url(test)?;
    let prefix = format!("groups-{test}-{}", Token::generate().short());
    Some(EtcdLockStore::builder().key_prefix(prefix).connect(&url).await.expect("connect"))
}

/// `ModRevision < R + 1` over a prefix fails once a key under it is created or changed
/// after revision R, and holds after a delete (which only frees capacity).
#[tokio::test]
async fn the_prefix_guard_fails_on_writes_not_on_deletes() {
    let Some(store) = store("guard").await else { return };
    let mut kv = store.client().kv_client();
    let prefix = format!("{}/guard\u{1f}", store.key_prefix());
    kv.put(format!("{prefix}old"), "x", None).await.unwrap();
    let guarded = |revision: i64| {
        Txn::new()
            .when([Compare::mod_revision(prefix.as_str(), CompareOp::Less, revision + 1).with_prefix()])
            .and_then([TxnOp::put(format!("{prefix}granted"), "y", None)])
    };
    let read = kv.get(prefix.as_str(), None).await.unwrap();
    let revision = read.header().unwrap().revision();
    kv.delete(format!("{prefix}old"), None).await.unwrap();
    assert!(kv.txn(guarded(revision)).await.unwrap().succeeded(), "a delete failed the guard");

    let revision = kv.get(prefix.as_str(), None).await.unwrap().header().unwrap().revision();
    kv.put(format!("{prefix}new"), "z", None).await.unwrap();
    assert!(!kv.txn(guarded(revision)).await.unwrap().succeeded(), "a new key under the prefix passed the guard");
    let revision = kv.get(prefix.as_str(), None).await.unwrap().header().unwrap().revision();
    kv.put(format!("{prefix}new"), "changed", None).await.unwrap();
    assert!(!kv.txn(guarded(revision)).await.unwrap().succeeded(), "a changed key passed the guard");
    kv.delete(prefix.as_str(), Some(distlock_etcd::etcd_client::DeleteOptions::new().with_prefix())).await.unwrap();
}

/// Eight tasks take overlapping two-name groups over three names, in mixed modes, with
/// waiting: no name ever has a writer beside anyone else, fences strictly increase per
/// name, and every task finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_groups_keep_every_name_exclusive() {
    let Some(store) = store("overlap").await else { return };
    let locks = LockManager::new(Arc::new(store));
    let names = ["a", "b", "c"];
    // Per name: +1000 per writer inside, +1 per reader inside.
    let inside: Arc<[AtomicI64; 3]> = Arc::new(Default::default());
    let last_fence: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let violations = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..8usize {
        let (locks, inside, last_fence, violations) =
            (locks.clone(), Arc::clone(&inside), Arc::clone(&last_fence), Arc::clone(&violations));
        tasks.push(tokio::spawn(async move {
            for round in 0..15usize {
                let (first, second) = ((task + round) % 3, (task + round + 1) % 3);
                let modes =
                    [LockMode::Exclusive, if (task + round) % 2 == 0 { LockMode::Shared } else { LockMode::Exclusive }];
                let member = |index: usize, mode: LockMode| match mode {
                    LockMode::Shared => GroupMember::shared(names[index]).unwrap(),
                    _ => GroupMember::exclusive(names[index]).unwrap(),
                };
                let group = LockGroup::new([member(first, modes[0]), member(second, modes[1])]).unwrap();
                let options =
                    LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_millis(20));
                let held = locks.lock_group_opts(&group, Duration::from_secs(30), &options).await.unwrap();
                let fence = held.stamp().expect("etcd fences every group");
                for (index, mode) in [(first, modes[0]), (second, modes[1])] {
                    let weight = if mode == LockMode::Shared { 1 } else { 1000 };
                    let before = inside[index].fetch_add(weight, Ordering::SeqCst);
                    if (mode == LockMode::Exclusive && before != 0) || (mode == LockMode::Shared && before >= 1000) {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    if last_fence[index].fetch_max(fence, Ordering::SeqCst) >= fence && mode == LockMode::Exclusive {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                for (index, mode) in [(first, modes[0]), (second, modes[1])] {
                    inside[index].fetch_sub(if mode == LockMode::Shared { 1 } else { 1000 }, Ordering::SeqCst);
                }
                held.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task).await.expect("a task never finished").unwrap();
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0, "a name had a writer beside another holder, or a fence went back");
    for name in names {
        assert!(locks.holders(name).await.unwrap().is_empty(), "{name} is still held");
    }
}
