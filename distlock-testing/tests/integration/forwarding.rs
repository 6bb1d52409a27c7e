//! `FaultyStore` forwards every ability of the store it wraps — lock groups, the fair
//! queue, listing, lease values — and its faults reach those too, one test per ability.
//! The store traits have no default method bodies, so a wrapper that forgets a method
//! does not compile; the last test checks, from the sources, that it stays that way.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, GroupLockStore, GroupMember, GroupRequest, KeyPattern, LeaseValue, LeaseValueStore,
    ListCursor, ListPage, LockError, LockGroup, LockInfo, LockKey, LockManager, LockMode, LockOptions, LockStore,
    OwnerId, QueueStore, StoreKey, StoreMember, Token, Ttl,
};
use distlock_memory::MemoryLockStore;
use distlock_testing::{Faults, FaultyStore, InjectedFault, Op};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);
const PATIENCE: Duration = Duration::from_secs(600);

fn setup() -> (LockManager, Faults, MemoryLockStore) {
    let memory = MemoryLockStore::new();
    let store = FaultyStore::new(memory.clone());
    let faults = store.faults();
    (LockManager::new(Arc::new(store)), faults, memory)
}

fn store_key(key: &str) -> StoreKey {
    LockKey::new(key).unwrap().to_store_key()
}

fn write(key: &str) -> LockGroup {
    LockGroup::single(GroupMember::exclusive(key).unwrap()).unwrap()
}

fn read(key: &str) -> LockGroup {
    LockGroup::single(GroupMember::shared(key).unwrap()).unwrap()
}

/// Asserts that `err` is an injected failure of `op` on the memory store, naming `key`.
#[track_caller]
fn assert_injected(err: &LockError, op: Op, key: Option<&str>) {
    assert!(
        matches!(err, LockError::Store { backend: "memory", operation, key: got, .. }
            if *operation == op.as_str() && got.as_deref() == key),
        "{op}: {err}"
    );
    assert_eq!(InjectedFault::of(err).map(InjectedFault::op), Some(op), "{err}");
}

/// Asserts that each of `errors` is an injected failure of its operation, naming
/// `key(op)`, and that the operation was called once.
#[track_caller]
fn assert_each_injected_once(faults: &Faults, errors: &[(Op, LockError)], key: impl Fn(Op) -> Option<&'static str>) {
    for (op, err) in errors {
        assert_injected(err, *op, key(*op));
        assert_eq!(faults.calls(*op), 1, "{op}");
    }
}

/// Read/write locks through the wrapper work as on the memory store itself, and every
/// group operation is counted.
#[tokio::test(start_paused = true)]
async fn read_write_locks_work_through_the_wrapper() {
    let (locks, faults, memory) = setup();
    let groups = locks.store().groups().expect("the memory store's groups are forwarded");
    assert_eq!(groups.max_group(), GroupLockStore::max_group(&memory));
    let first = locks.lock_read("doc", TTL).await.unwrap();
    let second = locks.lock_read("doc", TTL).await.unwrap();
    assert!(locks.try_lock_group(&write("doc"), TTL).await.unwrap().is_none(), "a writer beside readers");
    assert_eq!(memory.holders(&store_key("doc")).await.unwrap().len(), 2, "the readers hold on the memory store");
    assert_eq!(locks.holders("doc").await.unwrap().len(), 2);
    first.release().await.unwrap();
    second.release().await.unwrap();
    let writer = locks.try_lock_group(&write("doc"), TTL).await.unwrap().expect("the writer once readers left");
    assert!(writer.extend(TTL).await.unwrap());
    assert!(locks.try_lock_group(&read("doc"), TTL).await.unwrap().is_none(), "a reader beside the writer");
    writer.release().await.unwrap();
    assert!(memory.holders(&store_key("doc")).await.unwrap().is_empty());
    for (op, n) in [(Op::AcquireGroup, 5), (Op::ReleaseGroup, 3), (Op::ExtendGroup, 1), (Op::Holders, 1)] {
        assert_eq!(faults.calls(op), n, "{op}");
    }
    assert_eq!(faults.calls(Op::Acquire) + faults.calls(Op::Release), 0, "group calls went to single locks");
}

/// A failed group release is the application's error, and the dropped handle's
/// background release frees the group.
#[tokio::test(start_paused = true)]
async fn an_injected_failure_on_group_release_shows_up() {
    let (locks, faults, memory) = setup();
    let writer = locks.lock_write("report", TTL).await.unwrap();
    faults.fail_next(Op::ReleaseGroup, 1);
    let err = writer.release().await.unwrap_err();
    assert_injected(&err, Op::ReleaseGroup, Some("report"));
    assert!(!InjectedFault::of(&err).unwrap().reached_store());
    assert_eq!(memory.holders(&store_key("report")).await.unwrap().len(), 1, "a failed release freed the group");
    locks.flush_releases().await;
    assert_eq!(faults.calls(Op::ReleaseGroup), 2);
    assert!(memory.holders(&store_key("report")).await.unwrap().is_empty(), "the background release did not run");
    assert!(locks.try_lock_group(&write("report"), TTL).await.unwrap().is_some());
}

/// Every group operation fails under `fail_all`, with its own name, is delayed by
/// `delay`, and goes through again after `heal`.
#[tokio::test(start_paused = true)]
async fn every_group_operation_takes_faults() {
    let (locks, faults, _) = setup();
    let store = Arc::clone(locks.store());
    let groups = store.groups().unwrap();
    let key = store_key("outage");
    let keys = [key.clone()];
    let members = [StoreMember::new(key.clone(), LockMode::Exclusive, None)];
    let (token, owner, ttl) = (Token::generate(), OwnerId::new("app", "one").unwrap(), Ttl::new(TTL).unwrap());
    let request = GroupRequest::new(&members, &token, &owner, ttl, None, None);
    let group_ops = [
        Op::AcquireGroup,
        Op::ExtendGroup,
        Op::ReleaseGroup,
        Op::WithdrawIntents,
        Op::ReleaseOwner,
        Op::SetPermits,
        Op::Permits,
        Op::Holders,
        Op::Waiting,
        Op::WaitForChange,
    ];
    for op in group_ops {
        faults.fail_all(op);
    }
    let errors = [
        (Op::AcquireGroup, groups.try_acquire_group(request).await.map(drop).unwrap_err()),
        (Op::ExtendGroup, groups.extend_group(&keys, &token, ttl).await.map(drop).unwrap_err()),
        (Op::ReleaseGroup, groups.release_group(&keys, &token).await.map(drop).unwrap_err()),
        (Op::WithdrawIntents, groups.withdraw_intents(&keys, &token).await.unwrap_err()),
        (Op::ReleaseOwner, groups.release_owner(&owner).await.map(drop).unwrap_err()),
        (Op::SetPermits, groups.set_permits(&key, LockMode::Shared, Some(2)).await.unwrap_err()),
        (Op::Permits, groups.permits(&key, LockMode::Shared).await.map(drop).unwrap_err()),
        (Op::Holders, groups.holders(&key).await.map(drop).unwrap_err()),
        (Op::Waiting, groups.waiting(&key).await.map(drop).unwrap_err()),
        (Op::WaitForChange, groups.wait_for_change(request, TTL).await.unwrap_err()),
    ];
    assert_each_injected_once(&faults, &errors, |op| (op != Op::ReleaseOwner).then_some("outage"));
    let err = locks.lock_read("outage", TTL).await.unwrap_err();
    assert_injected(&err, Op::AcquireGroup, Some("outage"));

    faults.heal();
    faults.delay(Op::AcquireGroup, Duration::from_secs(2));
    let started = Instant::now();
    assert!(matches!(groups.try_acquire_group(request).await.unwrap(), distlock_api::GroupAcquire::Acquired { .. }));
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(groups.extend_group(&keys, &token, ttl).await.unwrap(), 1);
    groups.set_permits(&key, LockMode::Shared, Some(2)).await.unwrap();
    assert_eq!(groups.permits(&key, LockMode::Shared).await.unwrap(), Some(2));
    assert_eq!(groups.holders(&key).await.unwrap().len(), 1);
    assert_eq!(groups.waiting(&key).await.unwrap(), 0);
    groups.withdraw_intents(&keys, &token).await.unwrap();
    assert_eq!(groups.release_owner(&owner).await.unwrap(), 1);
    assert_eq!(groups.release_group(&keys, &token).await.unwrap(), 0);
}

/// Dropped release notifications reach waiting groups too: `wait_for_change` sleeps its
/// whole `max` instead of returning when the request could be granted.
#[tokio::test(start_paused = true)]
async fn dropped_notifications_reach_group_waits() {
    for dropped in [false, true] {
        let (locks, faults, _) = setup();
        faults.drop_release_notifications(dropped);
        let groups = locks.store().groups().unwrap();
        let members = [StoreMember::new(store_key("free"), LockMode::Shared, None)];
        let (token, owner) = (Token::generate(), OwnerId::new("app", "one").unwrap());
        let request = GroupRequest::new(&members, &token, &owner, Ttl::new(TTL).unwrap(), None, None);
        let started = Instant::now();
        groups.wait_for_change(request, Duration::from_secs(5)).await.unwrap();
        let expected = if dropped { Duration::from_secs(5) } else { Duration::ZERO };
        assert_eq!(started.elapsed(), expected, "dropped = {dropped}");
        assert_eq!(faults.calls(Op::WaitForChange), 1);
    }
}

/// The memory store's fair queue works through the wrapper: a fair waiter takes a place
/// (`queue_len`, counted and faulted as `Op::QueueLen`) and is handed the key; its
/// queued attempts count as `Op::Acquire`, its waits as `Op::WaitForRelease`.
#[tokio::test(start_paused = true)]
async fn the_fair_queue_is_forwarded() {
    let (locks, faults, memory) = setup();
    assert!(locks.store().capabilities().fair_queue);
    let held = locks.lock("queue", TTL).await.unwrap();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock_opts("queue", TTL, &LockOptions::new().wait(PATIENCE)).await }
    });
    faults.wait_for_calls(Op::Acquire, 2).await;
    let queue = locks.store().queue().expect("the memory store's queue is forwarded");
    assert_eq!(queue.queue_len(&store_key("queue")).await.unwrap(), 1, "the waiter took a place");
    assert_eq!(QueueStore::queue_len(&memory, &store_key("queue")).await.unwrap(), 1);
    faults.fail_next(Op::QueueLen, 1);
    let err = queue.queue_len(&store_key("queue")).await.unwrap_err();
    assert_injected(&err, Op::QueueLen, Some("queue"));
    assert_eq!(faults.calls(Op::QueueLen), 2);
    assert!(held.release().await.unwrap());
    let lock = tokio::time::timeout(PATIENCE, waiter).await.expect("the waiter's turn").unwrap().unwrap();
    assert!(faults.calls(Op::WaitForRelease) >= 1, "the queued waiter's wait was not forwarded");
    assert_eq!(memory.inspect(lock.store_key()).await.unwrap().map(|info| info.token).as_ref(), Some(lock.token()));
    assert!(lock.release().await.unwrap());
}

/// Listing is the wrapped store's, and takes faults.
#[tokio::test(start_paused = true)]
async fn listing_is_forwarded() {
    let (locks, faults, memory) = setup();
    let lock = locks.lock("listed", TTL).await.unwrap();
    let page = locks.store().list(&KeyPattern::all(), None, 10).await.unwrap();
    assert_eq!(page, memory.list(&KeyPattern::all(), None, 10).await.unwrap());
    assert_eq!(page.locks.len(), 1);
    faults.fail_next(Op::List, 1);
    assert_injected(&locks.store().list(&KeyPattern::all(), None, 10).await.unwrap_err(), Op::List, None);
    assert!(lock.release().await.unwrap());
}

/// Lease values are the wrapped store's, and take faults: both value operations fail
/// under `fail_all`, with their own names, are delayed by `delay`, and after `heal` a value
/// set through the wrapper is on the memory store and is read back through it.
#[tokio::test(start_paused = true)]
async fn lease_values_are_forwarded() {
    let (locks, faults, memory) = setup();
    let store = Arc::clone(locks.store());
    let values = store.values().expect("the memory store's values are forwarded");
    let lock = locks.lock("leader", TTL).await.unwrap();
    let (key, token) = (lock.store_key(), lock.token());
    let address = LeaseValue::new("10.0.0.7:8080").unwrap();
    faults.fail_all(Op::SetValue);
    faults.fail_all(Op::InspectValue);
    let errors = [
        (Op::SetValue, values.set_value(key, token, &address).await.unwrap_err()),
        (Op::InspectValue, values.inspect_value(key).await.unwrap_err()),
    ];
    assert_each_injected_once(&faults, &errors, |_| Some("leader"));
    let on_memory = LeaseValueStore::inspect_value(&memory, key).await.unwrap().expect("the memory store's holder");
    assert_eq!(on_memory.value, None, "a failed set_value reached the store");

    faults.heal();
    faults.delay(Op::SetValue, Duration::from_secs(2));
    let started = Instant::now();
    assert!(values.set_value(key, token, &address).await.unwrap());
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert!(!values.set_value(key, &Token::generate(), &address).await.unwrap(), "a value on another's lease");
    let on_memory = LeaseValueStore::inspect_value(&memory, key).await.unwrap().expect("the memory store's holder");
    assert_eq!((&on_memory.holder.token, on_memory.value.as_ref()), (token, Some(&address)));
    assert_eq!(values.inspect_value(key).await.unwrap(), Some(on_memory));
    assert_eq!((faults.calls(Op::SetValue), faults.calls(Op::InspectValue)), (3, 2));
    assert!(lock.release().await.unwrap());
}

/// A store with none of the optional abilities: the trait's required methods only.
#[derive(Debug, Default)]
struct Plain(MemoryLockStore);

#[async_trait]
impl LockStore for Plain {
    fn backend(&self) -> &'static str {
        "plain"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }
    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        self.0.try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        self.0.release(key, token).await
    }
    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        self.0.extend(key, token, ttl).await
    }
    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        self.0.inspect(key).await
    }
    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.0.wait_for_release(key, max).await
    }
    fn queue(&self) -> Option<&dyn QueueStore> {
        None
    }
    fn groups(&self) -> Option<&dyn GroupLockStore> {
        None
    }
    fn values(&self) -> Option<&dyn LeaseValueStore> {
        None
    }
    async fn list(&self, _: &KeyPattern, _: Option<&ListCursor>, _: usize) -> Result<ListPage, LockError> {
        Err(LockError::Unsupported { backend: "plain", operation: "list" })
    }
}

/// The wrapper adds no ability the wrapped store lacks: no groups (the manager's group
/// calls are `Unsupported`, naming the wrapped backend), no listing, no queue, no lease
/// values.
#[tokio::test(start_paused = true)]
async fn a_store_without_abilities_stays_without() {
    let store = FaultyStore::new(Plain::default());
    assert!(store.groups().is_none());
    assert!(store.queue().is_none());
    assert!(store.values().is_none());
    assert_eq!(store.capabilities(), Capabilities::NONE);
    let locks = LockManager::new(Arc::new(store));
    let err = locks.try_lock_group(&write("g"), TTL).await.unwrap_err();
    assert!(matches!(err, LockError::Unsupported { backend: "plain", operation: "acquire_group" }), "{err}");
    let err = locks.store().list(&KeyPattern::all(), None, 10).await.unwrap_err();
    assert!(matches!(err, LockError::Unsupported { backend: "plain", operation: "list" }), "{err}");
    assert!(locks.try_lock("g", TTL).await.unwrap().is_some());
}

// ---- The guard: every trait method is written out ----

/// The workspace folder.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// The methods with a default body in the `{ … }` block that follows the first line
/// starting with `header` in one of `files` (comment lines ignored).
fn default_bodies(files: &[PathBuf], header: &str) -> Vec<String> {
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut lines = text.lines().skip_while(|line| !line.trim_start().starts_with(header));
        if lines.next().is_none() {
            continue;
        }
        let (mut bodies, mut method, mut depth, mut declared) = (Vec::new(), String::new(), 1usize, 0);
        for line in lines.map(str::trim) {
            if line.starts_with("//") {
                continue;
            }
            if depth == 1 {
                let rest = line.strip_prefix("async ").unwrap_or(line);
                if let Some(rest) = rest.strip_prefix("fn ") {
                    method = rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap().to_owned();
                    declared += 1;
                }
                if line.ends_with('{') {
                    bodies.push(method.clone());
                }
            }
            depth += line.matches('{').count();
            depth -= line.matches('}').count();
            if depth == 0 {
                assert!(declared > 0, "{}: read no method of `{header}`", file.display());
                return bodies;
            }
        }
        panic!("{}: the block of `{header}` does not end", file.display());
    }
    panic!("no `{header}` in {files:?}");
}

/// The store traits have no default method bodies: a default that a wrapper (such as
/// `FaultyStore`) does not override compiles, and silently bypasses the wrapped store.
/// Optional abilities are separate traits reached through one accessor each.
#[test]
fn the_store_traits_have_no_default_bodies() {
    let api = sources(&workspace().join("distlock-api/src"));
    let traits =
        ["pub trait LockStore", "pub trait QueueStore", "pub trait GroupLockStore", "pub trait LeaseValueStore"];
    for header in traits {
        let bodies = default_bodies(&api, header);
        assert!(bodies.is_empty(), "`{header}` has default bodies in {bodies:?}: make them required");
    }
}
