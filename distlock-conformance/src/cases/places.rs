//! What waits and what groups hold, as tools read it: `GroupLockStore::list_groups`,
//! `GroupLockStore::places` and `QueueStore::queue_places`, with the age of each place.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use distlock_api::{
    DynLockStore, GroupAcquire, GroupLockStore, GroupRequest, HeldLock, KeyPattern, ListCursor, LockError, LockMode,
    OwnerId, QueuedAttempt, StoreKey, StoreMember, Token, Ttl, WaitingPlace,
};

use super::{Keys, LONG_TTL};

/// How long the places of these cases live: longer than the cases take, also a listing
/// that pages one key at a time through a shared server's whole keyspace.
const PLACE_TTL: Duration = Duration::from_secs(120);
/// Slack for the bounds below: clock granularity and the answer's way back.
const SLACK: Duration = Duration::from_secs(2);
/// How long a case lets its places age before it reads them again.
const AGE: Duration = Duration::from_millis(1_200);

fn ttl(duration: Duration) -> Ttl {
    Ttl::new(duration).expect("a valid TTL")
}

/// `Some(answer)`, or `None` when the store refuses `operation` with
/// [`LockError::Unsupported`] naming itself and that operation (what a store that cannot
/// read it is held to).
fn supported<T>(store: &DynLockStore, operation: &str, answer: Result<T, LockError>) -> Option<T> {
    match answer {
        Ok(answer) => Some(answer),
        Err(LockError::Unsupported { backend, operation: op }) if backend == store.backend() && op == operation => None,
        Err(err) => panic!("{operation} failed: {err}"),
    }
}

/// Every name of a group listing matching `pattern`, `limit` names per page, merged by
/// name (Redis may list a name twice).
async fn list_groups_all(
    groups: &dyn GroupLockStore,
    pattern: &KeyPattern,
    limit: usize,
) -> Result<BTreeMap<String, HeldLock>, LockError> {
    let mut names = BTreeMap::new();
    let mut cursor: Option<ListCursor> = None;
    for _ in 0..1_000_000 {
        let page = groups.list_groups(pattern, cursor.as_ref(), limit).await?;
        for held in page.locks {
            names.insert(held.key.as_str().to_owned(), held);
        }
        match page.next {
            None => return Ok(names),
            Some(next) => {
                assert_ne!(cursor.as_ref(), Some(&next), "the cursor did not move");
                cursor = Some(next);
            }
        }
    }
    panic!("the group listing of {pattern} did not complete");
}

/// One blocked waiting attempt of a one-member group: leaves its place, returns its ticket.
async fn wait_once(groups: &dyn GroupLockStore, member: &StoreMember, token: &Token, ticket: Option<u64>) -> u64 {
    let owner = OwnerId::new("conformance", "waiter").unwrap();
    let members = std::slice::from_ref(member);
    let request = GroupRequest::new(members, token, &owner, ttl(LONG_TTL), Some(ttl(PLACE_TTL)), ticket);
    match groups.try_acquire_group(request).await.unwrap() {
        GroupAcquire::Blocked { ticket } => ticket,
        other => panic!("the waiting group was not blocked: {other:?}"),
    }
}

/// Asserts a place's token, mode and time left, and that it has waited at least `least`
/// and at most `since` (the time measured since it was first taken; also the most its
/// lease can have run down since its last refresh).
#[track_caller]
fn assert_place(place: &WaitingPlace, token: &Token, mode: LockMode, least: Duration, since: Instant) {
    let most = since.elapsed() + SLACK;
    assert_eq!((&place.token, place.mode), (token, mode), "{place:?}");
    assert!(place.ttl_left <= PLACE_TTL && place.ttl_left > PLACE_TTL.saturating_sub(most), "{place:?}");
    let waited = place.waited.expect("the store records when a place was taken");
    assert!(waited >= least && waited <= most, "waited {waited:?}, at least {least:?}, at most {most:?}");
}

/// A group listing reports each name with a live holder or place, with its holders
/// (mode, owner, fence, time left) and the places of waiting groups, each with the time
/// it has waited — counted from its first blocked attempt, not from its last refresh —
/// filtered by the pattern and page by page; released names leave it.
pub async fn group_listing_reports_holders_and_waiting_places(store: Arc<DynLockStore>) {
    let Some(groups) = store.groups() else {
        assert!(!store.capabilities().group_hash_tag, "a store without groups has no group hash tags");
        return;
    };
    let keys = Keys::for_groups("list-groups", &store);
    let pattern = KeyPattern::new(keys.key("*")).unwrap();
    let Some(empty) = supported(&store, "list_groups", list_groups_all(groups, &pattern, 10).await) else { return };
    assert!(empty.is_empty(), "{empty:?}");

    let (reader_a, reader_b) = (OwnerId::new("conformance", "a").unwrap(), OwnerId::new("conformance", "b").unwrap());
    let shared = |name: &str| StoreMember::new(keys.store_key(name), LockMode::Shared, None);
    let exclusive = |name: &str| StoreMember::new(keys.store_key(name), LockMode::Exclusive, None);
    let grant = |member: StoreMember, owner: OwnerId| async move {
        let token = Token::generate();
        let members = [member];
        let request = GroupRequest::new(&members, &token, &owner, ttl(LONG_TTL), None, None);
        match groups.try_acquire_group(request).await.unwrap() {
            GroupAcquire::Acquired { fence } => (token, fence),
            other => panic!("not granted: {other:?}"),
        }
    };
    let granted_at = Instant::now();
    let (read_a, fence_a) = grant(shared("doc"), reader_a.clone()).await;
    let (read_b, fence_b) = grant(shared("doc"), reader_b.clone()).await;
    let (write, fence_w) = grant(exclusive("other"), reader_a.clone()).await;
    let writer = Token::generate();
    let placed_at = Instant::now();
    let ticket = wait_once(groups, &exclusive("doc"), &writer, None).await;

    let listed = list_groups_all(groups, &pattern, 1).await.unwrap();
    assert_eq!(listed.keys().cloned().collect::<Vec<_>>(), [keys.key("doc"), keys.key("other")], "{listed:?}");
    let doc = &listed[&keys.key("doc")];
    let mut holders: Vec<_> = doc.holders.iter().map(|h| (h.token.clone(), h.mode, h.owner.clone(), h.fence)).collect();
    holders.sort_by(|a, b| a.2.cmp(&b.2));
    assert_eq!(
        holders,
        [
            (read_a.clone(), LockMode::Shared, Some(reader_a.as_str().to_owned()), fence_a),
            (read_b.clone(), LockMode::Shared, Some(reader_b.as_str().to_owned()), fence_b),
        ],
        "{doc:?}"
    );
    for holder in &doc.holders {
        let most = granted_at.elapsed() + SLACK;
        assert!(holder.ttl_left <= LONG_TTL && holder.ttl_left > LONG_TTL.saturating_sub(most), "{holder:?}");
    }
    let [place] = doc.waiting.as_slice() else { panic!("one waiting place expected: {doc:?}") };
    assert_place(place, &writer, LockMode::Exclusive, Duration::ZERO, placed_at);
    let other = &listed[&keys.key("other")];
    let [holder] = other.holders.as_slice() else { panic!("one holder expected: {other:?}") };
    assert_eq!((&holder.token, holder.mode, holder.fence), (&write, LockMode::Exclusive, fence_w));
    assert!(other.waiting.is_empty(), "{other:?}");
    let only_other = KeyPattern::new(keys.key("oth?r")).unwrap();
    let filtered = list_groups_all(groups, &only_other, 100).await.unwrap();
    assert_eq!(filtered.keys().cloned().collect::<Vec<_>>(), [keys.key("other")], "{filtered:?}");

    // The place ages from the group's first blocked attempt: a refresh keeps its age.
    tokio::time::sleep(AGE).await;
    assert_eq!(wait_once(groups, &exclusive("doc"), &writer, Some(ticket)).await, ticket);
    let later = Token::generate();
    let later_at = Instant::now();
    wait_once(groups, &shared("doc"), &later, None).await;
    let places = groups.places(&keys.store_key("doc")).await.unwrap();
    let [first, second] = places.as_slice() else { panic!("two places expected: {places:?}") };
    assert_place(first, &writer, LockMode::Exclusive, AGE, placed_at);
    assert_place(second, &later, LockMode::Shared, Duration::ZERO, later_at);
    assert!(second.waited < first.waited, "the later place is younger: {places:?}");
    assert_eq!(groups.waiting(&keys.store_key("doc")).await.unwrap(), 2);

    groups.withdraw_intents(&[keys.store_key("doc")], &writer).await.unwrap();
    groups.withdraw_intents(&[keys.store_key("doc")], &later).await.unwrap();
    for (token, name) in [(&read_a, "doc"), (&read_b, "doc"), (&write, "other")] {
        assert_eq!(groups.release_group(&[keys.store_key(name)], token).await.unwrap(), 1);
    }
    assert!(groups.places(&keys.store_key("doc")).await.unwrap().is_empty());
    let left = list_groups_all(groups, &pattern, 10).await.unwrap();
    assert!(left.is_empty(), "released names are not listed: {left:?}");
}

/// A fair queue's places are read in arrival order, each with its time left and the time
/// it has waited — counted from when it was first taken, not from its last refresh.
pub async fn queue_places_report_waiters_in_arrival_order_with_their_age(store: Arc<DynLockStore>) {
    let Some(queue) = store.queue() else {
        assert!(!store.capabilities().fair_queue, "a fair queue is reached through queue()");
        return;
    };
    let keys = Keys::new("queue-places");
    let key: StoreKey = keys.store_key("k");
    let Some(none) = supported(&store, "queue_places", queue.queue_places(&key).await) else { return };
    assert!(none.is_empty(), "{none:?}");
    let holder = Token::generate();
    assert!(store.try_acquire(&key, &holder, ttl(LONG_TTL)).await.unwrap().is_acquired());
    let (first, second) = (Token::generate(), Token::generate());
    let attempt = |token| QueuedAttempt { key: &key, token, ttl: ttl(LONG_TTL), place: ttl(PLACE_TTL) };
    let placed_at = Instant::now();
    assert!(!queue.try_acquire_queued(attempt(&first)).await.unwrap().is_acquired());
    assert!(!queue.try_acquire_queued(attempt(&second)).await.unwrap().is_acquired());
    let places = queue.queue_places(&key).await.unwrap();
    let [a, b] = places.as_slice() else { panic!("two places expected: {places:?}") };
    assert_place(a, &first, LockMode::Exclusive, Duration::ZERO, placed_at);
    assert_place(b, &second, LockMode::Exclusive, Duration::ZERO, placed_at);

    tokio::time::sleep(AGE).await;
    assert!(!queue.try_acquire_queued(attempt(&first)).await.unwrap().is_acquired(), "refreshed, still waiting");
    let places = queue.queue_places(&key).await.unwrap();
    let [a, b] = places.as_slice() else { panic!("two places expected: {places:?}") };
    assert_place(a, &first, LockMode::Exclusive, AGE, placed_at);
    assert_place(b, &second, LockMode::Exclusive, AGE, placed_at);
    assert_eq!(queue.queue_len(&key).await.unwrap(), 2);

    assert!(!store.release(&key, &second).await.unwrap(), "a waiter's release only leaves its place");
    let places = queue.queue_places(&key).await.unwrap();
    assert_eq!(places.iter().map(|place| &place.token).collect::<Vec<_>>(), [&first], "{places:?}");
    assert!(store.release(&key, &holder).await.unwrap());
    // The key went to the first waiter: its next attempt takes it, and leaves no place.
    assert!(queue.try_acquire_queued(attempt(&first)).await.unwrap().is_acquired());
    assert!(queue.queue_places(&key).await.unwrap().is_empty());
    assert!(store.release(&key, &first).await.unwrap());
}
