//! Lock groups: read/write locks, semaphores, all-or-nothing groups.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{
    Admission, DynLockStore, GroupAcquire, GroupLock, GroupMember, GroupRequest, InvalidGroup, LockError, LockGroup,
    LockManager, LockMode, LockOptions, OwnerId, Permits, StoreMember, Token, Ttl,
};
use tokio::time::Instant;

use super::{count_reaches, manager, Keys, LONG_TTL, RETRY};

fn read(key: &str) -> LockGroup {
    LockGroup::single(GroupMember::shared(key).unwrap()).unwrap()
}

fn write(key: &str) -> LockGroup {
    LockGroup::single(GroupMember::exclusive(key).unwrap()).unwrap()
}

fn semaphore(key: &str, permits: u32) -> LockGroup {
    LockGroup::single(GroupMember::shared(key).unwrap().with_permits(permits)).unwrap()
}

async fn try_take(locks: &LockManager, group: &LockGroup) -> Option<GroupLock> {
    locks.try_lock_group(group, LONG_TTL).await.unwrap()
}

fn waiting(wait: Duration) -> LockOptions {
    LockOptions::new().wait(wait).retry_interval(RETRY)
}

/// Whether the store has lock groups. A store without them (Redlock) is held to what it
/// promises instead: every group call of the manager is refused with
/// [`LockError::Unsupported`] naming the store and the operation, at once and before
/// anything is taken.
async fn has_groups(store: &Arc<DynLockStore>) -> bool {
    if store.groups().is_some() {
        return true;
    }
    refuses_groups(store).await;
    false
}

async fn refuses_groups(store: &Arc<DynLockStore>) {
    let keys = Keys::new("no-groups");
    let locks = manager(store);
    let key = keys.key("k");
    let backend = store.backend();
    let refused = |operation: &str, result: Result<(), LockError>| match result {
        Err(LockError::Unsupported { backend: by, operation: op }) if by == backend && op == operation => {}
        other => panic!("{operation} on a store without groups: {other:?}, not Unsupported"),
    };
    let at_once = Duration::from_secs(10);
    let attempt = tokio::time::timeout(at_once, locks.try_lock_group(&write(&key), LONG_TTL)).await;
    refused("acquire_group", attempt.expect("a refused attempt returns at once").map(drop));
    let waiting = tokio::time::timeout(at_once, locks.lock_read(&key, LONG_TTL)).await;
    refused("acquire_group", waiting.expect("a refused wait returns at once").map(drop));
    refused("holders", locks.holders(&key).await.map(drop));
    refused("set_permits", locks.set_permits(&key, LockMode::Shared, Some(2)).await);
    refused("release_owner", locks.release_owner().await.map(drop));
    assert!(store.inspect(&keys.store_key("k")).await.unwrap().is_none(), "a refused group took the key");
    let lock = locks.try_lock(&key, LONG_TTL).await.unwrap().expect("single locks work beside refused groups");
    assert!(lock.release().await.unwrap());
}

/// Many readers hold a name together; a writer gets it only when they are all gone, and
/// excludes readers while it holds it.
pub async fn group_many_readers_one_writer(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-rw", &store);
    let locks = manager(&store);
    let key = keys.key("doc");
    let mut readers = Vec::new();
    for _ in 0..5 {
        readers.push(try_take(&locks, &read(&key)).await.expect("readers share a name"));
    }
    assert!(readers.iter().all(|reader| reader.members()[0].1 == LockMode::Shared));
    assert_eq!(locks.holders(&key).await.unwrap().len(), 5);
    assert!(try_take(&locks, &write(&key)).await.is_none(), "a writer got in beside readers");
    for reader in readers {
        reader.release().await.unwrap();
    }
    let writer = try_take(&locks, &write(&key)).await.expect("the writer gets the name once readers left");
    assert!(try_take(&locks, &read(&key)).await.is_none(), "a reader got in beside the writer");
    assert!(try_take(&locks, &write(&key)).await.is_none(), "two writers at once");
    let holders = locks.holders(&key).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].mode, LockMode::Exclusive);
    assert_eq!(holders[0].owner.as_deref(), Some(locks.owner().as_str()));
    assert!(holders[0].ttl_left <= LONG_TTL);
    writer.release().await.unwrap();
    assert!(locks.holders(&key).await.unwrap().is_empty());
}

/// Writer preference: once a writer waits, new readers wait behind it, and the writer
/// gets the name as soon as the readers that were in leave.
pub async fn group_writer_beats_later_readers(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-writer-first", &store);
    let locks = manager(&store);
    let key = keys.key("doc");
    let first_reader = try_take(&locks, &read(&key)).await.unwrap();
    let writer = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move { locks.lock_group_opts(&write(&key), LONG_TTL, &waiting(Duration::from_secs(30))).await }
    });
    // Until the writer's intent is recorded, a new reader still gets in: probe until refused.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match try_take(&locks, &read(&key)).await {
            None => break,
            Some(probe) => probe.release().await.unwrap(),
        }
        assert!(Instant::now() < deadline, "new readers were never held back by the waiting writer");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first_reader.release().await.unwrap();
    let writer = tokio::time::timeout(Duration::from_secs(20), writer).await.expect("the writer starved").unwrap();
    let writer = writer.expect("the writer got the name");
    assert!(try_take(&locks, &read(&key)).await.is_none());
    writer.release().await.unwrap();
    let reader = try_take(&locks, &read(&key)).await.expect("readers come back after the writer");
    reader.release().await.unwrap();
}

/// A semaphore of N admits N holders, refuses the next, and admits it after a release.
pub async fn group_semaphore_max_count(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-max-count", &store);
    let locks = manager(&store);
    let key = keys.key("pool");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(try_take(&locks, &semaphore(&key, 3)).await.expect("a free slot"));
    }
    assert!(try_take(&locks, &semaphore(&key, 3)).await.is_none(), "a fourth holder of three slots");
    held.pop().unwrap().release().await.unwrap();
    held.push(try_take(&locks, &semaphore(&key, 3)).await.expect("a released slot is free"));
    for lock in held {
        lock.release().await.unwrap();
    }
}

/// 12 tasks on a semaphore of 3 slots: never more than 3 inside, everyone gets in, and
/// the waiters drain once the holders are gone.
pub async fn group_semaphore_bounds_concurrency(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-concurrency", &store);
    let locks = manager(&store);
    let key = keys.key("pool");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let (locks, key, inside, most) = (locks.clone(), key.clone(), Arc::clone(&inside), Arc::clone(&most));
        tasks.push(tokio::spawn(async move {
            let slot =
                locks.lock_group_opts(&semaphore(&key, 3), LONG_TTL, &waiting(Duration::from_secs(60))).await.unwrap();
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            slot.release().await.unwrap();
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task).await.expect("a task never got a slot").unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "{most} tasks inside a semaphore of 3");
    assert_eq!(inside.load(Ordering::SeqCst), 0);
    assert!(locks.holders(&key).await.unwrap().is_empty());
}

/// Waits until `name` has `count` waiting groups (live places), as the store reports.
async fn places_reach(store: &Arc<DynLockStore>, keys: &Keys, name: &str, count: usize) {
    let groups = store.groups().expect("a store with lock groups");
    let key = keys.store_key(name);
    let what = format!("the waiting groups of {name}");
    count_reaches(&what, count, || async { groups.waiting(&key).await.expect("waiting") }).await;
}

/// Starts one waiter per group, each once the previous one has its place (and the store's
/// millisecond clock moved on, so that tickets differ); every waiter records its index
/// when it gets in, holds a moment, and leaves. Returns the tasks and the record.
async fn arrive_in_order(
    store: &Arc<DynLockStore>,
    locks: &LockManager,
    keys: &Keys,
    name: &str,
    groups: Vec<LockGroup>,
) -> (Vec<tokio::task::JoinHandle<()>>, Arc<std::sync::Mutex<Vec<usize>>>) {
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, group) in groups.into_iter().enumerate() {
        // Retry intervals shrink with arrival: polling order alone would serve the last first.
        let retry = RETRY * u32::try_from(8 - i.min(7)).unwrap();
        let options = LockOptions::new().wait(Duration::from_secs(30)).retry_interval(retry);
        tasks.push(tokio::spawn({
            let (locks, served) = (locks.clone(), Arc::clone(&served));
            async move {
                let held = locks.lock_group_opts(&group, LONG_TTL, &options).await.expect("the waiter's turn");
                served.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(10)).await;
                held.release().await.unwrap();
            }
        }));
        places_reach(store, keys, name, i + 1).await;
        // Tickets are the store's clock in milliseconds: the next waiter arrives in a later one.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    (tasks, served)
}

/// Readers and writers waiting on one name are served in arrival order: a waiting writer
/// holds back later readers, and a waiting reader holds back later writers — one queue.
pub async fn group_waiters_are_served_in_arrival_order(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-fifo", &store);
    let locks = manager(&store);
    let key = keys.key("doc");
    let blocker = try_take(&locks, &write(&key)).await.unwrap();
    let arrivals = vec![read(&key), write(&key), read(&key), write(&key), read(&key)];
    let (tasks, served) = arrive_in_order(&store, &locks, &keys, "doc", arrivals).await;
    blocker.release().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task).await.expect("every waiter is served").unwrap();
    }
    assert_eq!(*served.lock().unwrap(), [0, 1, 2, 3, 4], "served in arrival order");
    places_reach(&store, &keys, "doc", 0).await;
}

/// A group blocked right after another stays behind it at every later attempt, also when
/// both come within one clock tick: a reader blocked by a waiting writer's place gets a
/// later ticket than the writer, so its retries keep yielding to that place (with equal
/// tickets, such a reader's retry was granted ahead of the writer, which then waited one
/// more read hold).
pub async fn group_later_waiter_stays_behind(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-behind", &store);
    let locks = manager(&store);
    let groups = store.groups().unwrap();
    let inside = try_take(&locks, &read(&keys.key("doc"))).await.unwrap();
    let doc = keys.store_key("doc");
    let ttl = Ttl::new(LONG_TTL).unwrap();
    let (owner, place) = (OwnerId::new("test", "behind").unwrap(), Some(ttl));
    let member = |mode| [StoreMember::new(doc.clone(), mode, Permits::DEFAULT.of(mode))];
    let (exclusive, shared) = (member(LockMode::Exclusive), member(LockMode::Shared));
    let ticket = |answer| match answer {
        GroupAcquire::Blocked { ticket } => ticket,
        granted => panic!("expected a blocked attempt, got {granted:?}"),
    };
    // Back to back, most pairs of attempts fall within one millisecond.
    for round in 0..20 {
        let (writer, reader) = (Token::generate(), Token::generate());
        let attempt = |members, token, given| GroupRequest::new(members, token, &owner, ttl, place, given);
        let w = ticket(groups.try_acquire_group(attempt(&exclusive, &writer, None)).await.unwrap());
        let r = ticket(groups.try_acquire_group(attempt(&shared, &reader, None)).await.unwrap());
        assert!(w < r, "round {round}: the reader's ticket {r} is not after the writer's {w}");
        let again = groups.try_acquire_group(attempt(&shared, &reader, Some(r))).await.unwrap();
        assert!(matches!(again, GroupAcquire::Blocked { .. }), "round {round}: the reader overtook the writer");
        groups.withdraw_intents(std::slice::from_ref(&doc), &reader).await.unwrap();
        groups.withdraw_intents(std::slice::from_ref(&doc), &writer).await.unwrap();
    }
    inside.release().await.unwrap();
}

/// Waiters for a semaphore's slot get it in arrival order — an older waiter's place
/// counts as a holder for every later one, so none overtakes it however its retries and
/// wake-ups are timed — and a barging request leaves places only for its exclusive members.
///
/// (With N permits, an older waiter's place takes one of the N slots for the later
/// waiters: they may enter beside it, but not instead of it.)
pub async fn group_semaphore_waiters_are_served_in_arrival_order(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-sem-fifo", &store);
    let locks = manager(&store);
    let key = keys.key("pool");
    let blocker = try_take(&locks, &semaphore(&key, 1)).await.unwrap();
    let arrivals = (0..5).map(|_| semaphore(&key, 1)).collect();
    let (tasks, served) = arrive_in_order(&store, &locks, &keys, "pool", arrivals).await;
    blocker.release().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task).await.expect("every waiter is served").unwrap();
    }
    assert_eq!(*served.lock().unwrap(), [0, 1, 2, 3, 4], "served in arrival order");

    // Two slots, both held, one waiter: a slot freed is the waiter's, not a newcomer's.
    let mut held = vec![
        try_take(&locks, &semaphore(&key, 2)).await.unwrap(),
        try_take(&locks, &semaphore(&key, 2)).await.unwrap(),
    ];
    let waiter = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move { locks.lock_group_opts(&semaphore(&key, 2), LONG_TTL, &waiting(Duration::from_secs(30))).await }
    });
    places_reach(&store, &keys, "pool", 1).await;
    held.pop().unwrap().release().await.unwrap();
    assert!(try_take(&locks, &semaphore(&key, 2)).await.is_none(), "a newcomer took the waiter's slot");
    let waiter = tokio::time::timeout(Duration::from_secs(30), waiter).await.expect("the waiter got the slot");
    waiter.unwrap().unwrap().release().await.unwrap();
    held.pop().unwrap().release().await.unwrap();

    // A barging request leaves places for its exclusive members only (writer preference).
    let groups = store.groups().unwrap();
    let holder = try_take(&locks, &write(&keys.key("gate"))).await.unwrap();
    let gate = keys.store_key("gate");
    let ttl = Ttl::new(LONG_TTL).unwrap();
    let (owner, place) = (OwnerId::new("test", "barging").unwrap(), Some(ttl));
    for (mode, places) in [(LockMode::Shared, 0), (LockMode::Exclusive, 1)] {
        let (member, token) = ([StoreMember::new(gate.clone(), mode, Permits::DEFAULT.of(mode))], Token::generate());
        let request = GroupRequest::new(&member, &token, &owner, ttl, place, None).barging();
        assert!(matches!(groups.try_acquire_group(request).await.unwrap(), GroupAcquire::Blocked { .. }));
        assert_eq!(groups.waiting(&gate).await.unwrap(), places, "a barging {mode:?} waiter's places");
        groups.withdraw_intents(std::slice::from_ref(&gate), &token).await.unwrap();
    }
    holder.release().await.unwrap();
}

/// A waiting group that is cancelled leaves its places at once (in the background), and
/// the waiters behind it go on.
pub async fn group_cancelled_waiter_leaves_its_places(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-cancel", &store);
    let locks = manager(&store);
    let key = keys.key("doc");
    let blocker = try_take(&locks, &write(&key)).await.unwrap();
    let cancelled = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move { locks.lock_group_opts(&read(&key), LONG_TTL, &waiting(Duration::from_secs(30))).await }
    });
    places_reach(&store, &keys, "doc", 1).await;
    cancelled.abort();
    let _ = cancelled.await;
    places_reach(&store, &keys, "doc", 0).await;
    blocker.release().await.unwrap();
    // Nothing is left to hold a writer back.
    try_take(&locks, &write(&key)).await.expect("the name is free").release().await.unwrap();
}

/// A semaphore with many slots: 200 holders at once.
pub async fn group_high_permit_count(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-high-count", &store);
    let locks = manager(&store);
    let key = keys.key("pool");
    let mut held = Vec::new();
    for _ in 0..200 {
        held.push(try_take(&locks, &semaphore(&key, 1000)).await.expect("a free slot of 1000"));
    }
    assert_eq!(locks.holders(&key).await.unwrap().len(), 200);
    for lock in held {
        lock.release().await.unwrap();
    }
}

/// A group is all or nothing: when one member is held, none is taken.
pub async fn group_failed_attempt_leaves_nothing(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-all-or-nothing", &store);
    let locks = manager(&store);
    let (a, b, c) = (keys.key("a"), keys.key("b"), keys.key("c"));
    let blocker = try_take(&locks, &write(&c)).await.unwrap();
    let group = LockGroup::new([
        GroupMember::exclusive(&a).unwrap(),
        GroupMember::shared(&b).unwrap(),
        GroupMember::exclusive(&c).unwrap(),
    ])
    .unwrap();
    assert!(try_take(&locks, &group).await.is_none());
    let err = locks.lock_group_opts(&group, LONG_TTL, &waiting(Duration::from_millis(200))).await.unwrap_err();
    assert!(err.is_not_acquired(), "{err}");
    assert!(locks.holders(&a).await.unwrap().is_empty(), "a failed group left a hold on a");
    assert!(locks.holders(&b).await.unwrap().is_empty(), "a failed group left a hold on b");
    // Its withdrawn intents do not hold back readers.
    try_take(&locks, &read(&a)).await.expect("a is free").release().await.unwrap();
    blocker.release().await.unwrap();
    let all = try_take(&locks, &group).await.expect("the whole group once c is free");
    assert_eq!(all.members().len(), 3);
    for key in [&a, &b, &c] {
        assert_eq!(locks.holders(key).await.unwrap().len(), 1);
    }
    all.release().await.unwrap();
}

/// Each holder has its own lease: a crashed reader's hold expires while a renewing
/// reader keeps its own, and a writer still waits for the live one.
pub async fn group_crashed_reader_expires_alone(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-crashed-reader", &store);
    let locks = manager(&store);
    let key = keys.key("doc");
    let renewing = locks
        .try_lock_group_opts(&read(&key), Duration::from_millis(600), &LockOptions::new().auto_renew())
        .await
        .unwrap()
        .expect("first reader");
    // Long enough to be seen held on a loaded machine, short enough to expire soon.
    let crashed = locks.try_lock_group(&read(&key), Duration::from_millis(1500)).await.unwrap().expect("second reader");
    let crashed_token = crashed.token().clone();
    let _ = crashed.into_stamp(); // crashes: no release, no renewal
    assert_eq!(locks.holders(&key).await.unwrap().len(), 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    while locks.holders(&key).await.unwrap().iter().any(|holder| holder.token == crashed_token) {
        assert!(Instant::now() < deadline, "the crashed reader's hold never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Several of the renewing reader's TTLs have passed: it still holds, alone.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let holders = locks.holders(&key).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(&holders[0].token, renewing.token());
    assert!(!renewing.is_lost());
    assert!(try_take(&locks, &write(&key)).await.is_none(), "the writer ignored the live reader");
    renewing.release().await.unwrap();
    try_take(&locks, &write(&key)).await.expect("free after the last reader").release().await.unwrap();
}

/// Two waiting groups that want each other's names in opposite modes both finish: the
/// intents of one never block the other forever.
pub async fn group_waiting_groups_do_not_deadlock(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-no-deadlock", &store);
    let locks = manager(&store);
    let (a, b) = (keys.key("a"), keys.key("b"));
    // Readers on both names make both groups wait (and record their intents).
    let reader_a = try_take(&locks, &read(&a)).await.unwrap();
    let reader_b = try_take(&locks, &read(&b)).await.unwrap();
    let g1 = LockGroup::new([GroupMember::exclusive(&a).unwrap(), GroupMember::shared(&b).unwrap()]).unwrap();
    let g2 = LockGroup::new([GroupMember::exclusive(&b).unwrap(), GroupMember::shared(&a).unwrap()]).unwrap();
    let run = |group: LockGroup| {
        let locks = locks.clone();
        tokio::spawn(async move {
            let held = locks.lock_group_opts(&group, LONG_TTL, &waiting(Duration::from_secs(30))).await?;
            tokio::time::sleep(Duration::from_millis(20)).await;
            held.release().await
        })
    };
    let (t1, t2) = (run(g1), run(g2));
    tokio::time::sleep(Duration::from_millis(200)).await; // both are waiting behind the readers
    reader_a.release().await.unwrap();
    reader_b.release().await.unwrap();
    for task in [t1, t2] {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("waiting groups deadlocked")
            .unwrap()
            .expect("a waiting group failed");
    }
    assert!(locks.holders(&a).await.unwrap().is_empty() && locks.holders(&b).await.unwrap().is_empty());
}

/// Releasing by stamp twice: the second is the typed `GroupNotHeld` error.
pub async fn group_release_twice_is_an_error(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-release-twice", &store);
    let locks = manager(&store);
    let group = LockGroup::new([GroupMember::exclusive(&keys.key("a")).unwrap()]).unwrap();
    let stamp = try_take(&locks, &group).await.unwrap().into_stamp();
    assert!(try_take(&locks, &group).await.is_none(), "into_stamp released the group");
    locks.release_stamp(&stamp).await.unwrap();
    match locks.release_stamp(&stamp).await {
        Err(LockError::GroupNotHeld { stamp: number }) => assert_eq!(number, stamp.fence().unwrap_or(0)),
        other => panic!("expected GroupNotHeld, got {other:?}"),
    }
    try_take(&locks, &group).await.expect("free after the release").release().await.unwrap();
}

/// `release_owner` frees every hold of that owner and nothing of another's.
pub async fn group_release_owner_frees_only_that_owner(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-release-owner", &store);
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let mine = manager(&store).with_owner(OwnerId::new("conformance", &format!("mine-{suffix}")).unwrap());
    let theirs = manager(&store).with_owner(OwnerId::new("conformance", &format!("theirs-{suffix}")).unwrap());
    let (a, b) = (keys.key("a"), keys.key("b"));
    let kept_a = try_take(&theirs, &read(&a)).await.unwrap();
    let lost_a = try_take(&mine, &read(&a)).await.unwrap().into_stamp();
    let lost_b = try_take(&mine, &write(&b)).await.unwrap().into_stamp();
    assert_eq!(mine.release_owner().await.unwrap(), 2);
    let holders = theirs.holders(&a).await.unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(&holders[0].token, kept_a.token());
    assert!(mine.holders(&b).await.unwrap().is_empty());
    assert!(matches!(mine.release_stamp(&lost_a).await, Err(LockError::GroupNotHeld { .. })));
    assert!(matches!(mine.release_stamp(&lost_b).await, Err(LockError::GroupNotHeld { .. })));
    assert_eq!(mine.release_owner().await.unwrap(), 0);
    kept_a.release().await.unwrap();
}

/// The lock-service specification's permits ([`Permits::SEED`]): one writer, and one
/// reader while no writer is in — for single names and for its example group of a write
/// and a read lock (`WS2` written, `WS1` read); the store's permits table overrides them.
pub async fn group_seed_permits_one_reader_one_writer(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-seed-permits", &store);
    let locks = manager(&store).with_permits(Permits::SEED);
    let key = keys.key("doc");
    let reader = try_take(&locks, &read(&key)).await.expect("a free name admits a reader");
    assert!(try_take(&locks, &read(&key)).await.is_none(), "a second reader beside the first");
    assert!(try_take(&locks, &write(&key)).await.is_none(), "a writer beside a reader");
    reader.release().await.unwrap();
    let writer = try_take(&locks, &write(&key)).await.expect("the writer once the reader left");
    assert!(try_take(&locks, &write(&key)).await.is_none(), "a second writer beside the first");
    assert!(try_take(&locks, &read(&key)).await.is_none(), "a reader beside the writer");
    writer.release().await.unwrap();

    let (ws1, ws2) = (keys.key("WS1"), keys.key("WS2"));
    let group = LockGroup::new([GroupMember::exclusive(&ws2).unwrap(), GroupMember::shared(&ws1).unwrap()]).unwrap();
    let held = try_take(&locks, &group).await.expect("the example group on free names");
    assert!(try_take(&locks, &read(&ws1)).await.is_none(), "a second reader of WS1");
    assert!(try_take(&locks, &read(&ws2)).await.is_none(), "a reader of WS2 while it is written");
    assert!(try_take(&locks, &group).await.is_none(), "the group twice");
    held.release().await.unwrap();
    let again = try_take(&locks, &group).await.expect("the group again after its release");
    again.release().await.unwrap();

    // The permits table overrides the manager's permits.
    locks.set_permits(&key, LockMode::Shared, Some(2)).await.unwrap();
    let two = [try_take(&locks, &read(&key)).await.expect("a first reader of 2"), {
        try_take(&locks, &read(&key)).await.expect("a second reader of 2")
    }];
    assert!(try_take(&locks, &read(&key)).await.is_none(), "a third reader of 2");
    for reader in two {
        reader.release().await.unwrap();
    }
    locks.set_permits(&key, LockMode::Shared, None).await.unwrap();
    let one = try_take(&locks, &read(&key)).await.expect("a reader");
    assert!(try_take(&locks, &read(&key)).await.is_none(), "the entry removed, one reader again");
    one.release().await.unwrap();
}

/// [`Admission::HoldersOnly`] (the lock-service specification's rule): a reader is
/// refused only while a writer holds, not while one waits — where a queued manager's
/// reader is held back by the waiting writer; such a manager's requests leave no places,
/// and its waiting groups still get the name once it is free.
pub async fn group_holders_only_reader_ignores_waiting_writers(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-holders-only", &store);
    let queued = manager(&store).with_permits(Permits::SEED);
    let rule = manager(&store).with_permits(Permits::SEED).with_admission(Admission::HoldersOnly);
    assert_eq!((queued.admission(), rule.admission()), (Admission::Queued, Admission::HoldersOnly));
    let (a, b) = (keys.key("a"), keys.key("b"));
    // A writer of a and b waits (b is written): it leaves a place on a, where no one holds.
    let blocker = try_take(&queued, &write(&b)).await.unwrap();
    let both = LockGroup::new([GroupMember::exclusive(&a).unwrap(), GroupMember::exclusive(&b).unwrap()]).unwrap();
    let writer = tokio::spawn({
        let (queued, both) = (queued.clone(), both.clone());
        async move { queued.lock_group_opts(&both, LONG_TTL, &waiting(Duration::from_secs(30))).await }
    });
    places_reach(&store, &keys, "a", 1).await;
    assert!(try_take(&queued, &read(&a)).await.is_none(), "a queued reader ignored the waiting writer");
    let reader = try_take(&rule, &read(&a)).await.expect("a reader refused while a writer only waits");
    assert!(try_take(&rule, &read(&a)).await.is_none(), "two readers of one permit");
    reader.release().await.unwrap();
    blocker.release().await.unwrap();
    let writer = tokio::time::timeout(Duration::from_secs(30), writer).await.expect("the writer starved").unwrap();
    let writer = writer.expect("the waiting writer got both names");
    assert!(try_take(&rule, &read(&a)).await.is_none(), "a reader beside a writer that holds");
    assert!(try_take(&rule, &write(&a)).await.is_none(), "a second writer");
    writer.release().await.unwrap();

    // A holders-only attempt that is blocked leaves no place, whatever its intent TTL.
    let groups = store.groups().unwrap();
    let inside = try_take(&queued, &read(&a)).await.unwrap();
    let doc = keys.store_key("a");
    let ttl = Ttl::new(LONG_TTL).unwrap();
    let owner = OwnerId::new("test", "holders-only").unwrap();
    let member = [StoreMember::new(doc.clone(), LockMode::Exclusive, Some(1))];
    let token = Token::generate();
    let request = GroupRequest::new(&member, &token, &owner, ttl, Some(ttl), None).holders_only();
    assert!(matches!(groups.try_acquire_group(request).await.unwrap(), GroupAcquire::Blocked { .. }));
    assert_eq!(groups.waiting(&doc).await.unwrap(), 0, "a holders-only request left a place");

    // Its waiting writer is woken by the release and gets the name.
    let waiter = tokio::spawn({
        let (rule, a) = (rule.clone(), a.clone());
        async move { rule.lock_group_opts(&write(&a), LONG_TTL, &waiting(Duration::from_secs(30))).await }
    });
    inside.release().await.unwrap();
    let waiter = tokio::time::timeout(Duration::from_secs(30), waiter).await.expect("the writer never got in").unwrap();
    let waiter = waiter.expect("the holders-only writer got the name");
    assert!(try_take(&queued, &read(&a)).await.is_none());
    waiter.release().await.unwrap();
    places_reach(&store, &keys, "a", 0).await;
}

/// A permits change in the store is seen by the next grant; lowering it keeps the holders
/// and delays new grants until the count drops.
pub async fn group_permits_change_is_seen_by_the_next_grant(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-permits", &store);
    let locks = manager(&store);
    let key = keys.key("pool");
    locks.set_permits(&key, LockMode::Shared, Some(1)).await.unwrap();
    let first = try_take(&locks, &read(&key)).await.unwrap();
    assert!(try_take(&locks, &read(&key)).await.is_none(), "the stored permit of 1 was not applied");
    // A member's own default does not override the stored entry.
    assert!(try_take(&locks, &semaphore(&key, 5)).await.is_none());
    locks.set_permits(&key, LockMode::Shared, Some(3)).await.unwrap();
    let second = try_take(&locks, &read(&key)).await.expect("raised permits not seen");
    let third = try_take(&locks, &read(&key)).await.unwrap();
    locks.set_permits(&key, LockMode::Shared, Some(1)).await.unwrap();
    assert_eq!(locks.holders(&key).await.unwrap().len(), 3, "lowering permits evicted holders");
    first.release().await.unwrap();
    second.release().await.unwrap();
    assert!(try_take(&locks, &read(&key)).await.is_none(), "granted beyond the lowered permits");
    third.release().await.unwrap();
    let only = try_take(&locks, &read(&key)).await.expect("free once below the permits");
    only.release().await.unwrap();
    // Exclusive permits: two writers at once when the store says so.
    locks.set_permits(&key, LockMode::Exclusive, Some(2)).await.unwrap();
    let w1 = try_take(&locks, &write(&key)).await.unwrap();
    let w2 = try_take(&locks, &write(&key)).await.expect("exclusive permits of 2");
    assert!(try_take(&locks, &read(&key)).await.is_none());
    w1.release().await.unwrap();
    w2.release().await.unwrap();
    locks.set_permits(&key, LockMode::Shared, None).await.unwrap();
    locks.set_permits(&key, LockMode::Exclusive, None).await.unwrap();
    let group_store = store.groups().expect("groups");
    assert_eq!(group_store.permits(&keys.store_key("pool"), LockMode::Shared).await.unwrap(), None);
}

/// Group stamps (fences) strictly increase across grants, also against single locks.
pub async fn group_fences_strictly_increase(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-fences", &store);
    let locks = manager(&store);
    let key = keys.key("a");
    let mut last = 0;
    for round in 0..5 {
        let group = if round % 2 == 0 { write(&key) } else { read(&key) };
        let held = try_take(&locks, &group).await.unwrap();
        let Some(stamp) = held.stamp() else {
            held.release().await.unwrap();
            return; // a store without fencing
        };
        assert!(stamp > last, "stamp {stamp} after {last}");
        last = stamp;
        held.release().await.unwrap();
        if let Some(single) = locks.try_lock(&keys.key("single"), LONG_TTL).await.unwrap() {
            if let Some(fence) = single.fence() {
                assert!(fence > last, "a single lock's fence {fence} after group stamp {last}");
                last = fence;
            }
            assert!(single.release().await.unwrap());
        }
    }
}

/// A renewed group outlives its TTL; a member taken away fires `lost` for the group.
pub async fn group_renewal_and_loss(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-renewal", &store);
    let locks = manager(&store);
    let group =
        LockGroup::new([GroupMember::exclusive(&keys.key("a")).unwrap(), GroupMember::shared(&keys.key("b")).unwrap()])
            .unwrap();
    let held = locks
        .try_lock_group_opts(&group, Duration::from_secs(1), &LockOptions::new().auto_renew())
        .await
        .unwrap()
        .unwrap();
    assert!(held.is_renewing());
    // Past two TTLs: only renewals keep it (a loaded machine still renews well within one).
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert!(!held.is_lost());
    assert!(try_take(&locks, &write(&keys.key("b"))).await.is_none(), "renewal let a member expire");
    // An administrator frees every hold of the owner: the next renewal sees it.
    locks.release_owner().await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), held.lost()).await.expect("lost did not fire");
    assert_eq!(reason, distlock_api::LossReason::NotHeld);
    assert!(matches!(held.release().await, Err(LockError::GroupNotHeld { .. })));
}

/// A dropped group handle is released promptly in the background.
pub async fn group_dropped_handle_is_released(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let keys = Keys::for_groups("group-drop", &store);
    let locks = manager(&store);
    let key = keys.key("a");
    drop(try_take(&locks, &write(&key)).await.unwrap());
    locks.flush_releases().await;
    assert!(locks.holders(&key).await.unwrap().is_empty(), "a dropped group was not released");
}

/// Bad groups are typed errors before any I/O.
pub async fn group_bad_input_is_rejected(store: Arc<DynLockStore>) {
    if !has_groups(&store).await {
        return;
    }
    let locks = manager(&store);
    let err = LockGroup::new(Vec::new()).unwrap_err();
    assert!(matches!(err, LockError::InvalidGroup { reason: InvalidGroup::Empty }), "{err}");
    let err = LockGroup::new([GroupMember::shared("x").unwrap(), GroupMember::exclusive("x").unwrap()]).unwrap_err();
    assert!(matches!(err, LockError::InvalidGroup { reason: InvalidGroup::DuplicateName { .. } }), "{err}");
    let err = LockGroup::new([GroupMember::shared("x").unwrap().with_permits(0)]).unwrap_err();
    assert!(matches!(err, LockError::InvalidGroup { reason: InvalidGroup::ZeroPermits { .. } }), "{err}");
    let too_many = (0..=LockGroup::MAX_MEMBERS).map(|i| GroupMember::shared(&format!("k{i}")).unwrap());
    let err = LockGroup::new(too_many).unwrap_err();
    assert!(matches!(err, LockError::InvalidGroup { reason: InvalidGroup::TooLarge { .. } }), "{err}");
    let err = locks.set_permits("x", LockMode::Shared, Some(0)).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidGroup { .. }), "{err}");
    let err = locks.try_lock_group(&read("x"), Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidOptions { .. }), "{err}");
    // The largest group every store takes is granted and released whole.
    let keys = Keys::for_groups("group-largest", &store);
    let max = store.groups().expect("groups").max_group().min(LockGroup::MAX_MEMBERS);
    let largest =
        LockGroup::new((0..max).map(|i| GroupMember::exclusive(&keys.key(&format!("k{i}"))).unwrap())).unwrap();
    let held = try_take(&locks, &largest).await.expect("the largest group");
    assert_eq!(locks.holders(&keys.key("k0")).await.unwrap().len(), 1);
    held.release().await.unwrap();
    assert!(locks.holders(&keys.key(&format!("k{}", max - 1))).await.unwrap().is_empty());
}
