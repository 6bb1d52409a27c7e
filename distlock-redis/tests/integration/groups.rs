//! Lock groups on the shared Redis (`DISTLOCK_REDIS_URL`), driven through the
//! `GroupLockStore` trait directly; each test under its own random key prefix.

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{cleanup, group_key_stem, group_lease_key, keys_left, raw, shared_store, store_key};
use distlock_api::{
    GroupAcquire, GroupLockStore, GroupRequest, InvalidGroup, LockError, LockMode, LockStore, OwnerId, StoreKey,
    StoreMember, Token, Ttl,
};
use distlock_conformance::kit::redis_server::RedisServer;
use distlock_redis::redis::aio::ConnectionManager;
use distlock_redis::RedisLockStore;

const LONG: Duration = Duration::from_secs(30);
const SOON: Duration = Duration::from_secs(10);

fn ttl(duration: Duration) -> Ttl {
    Ttl::new(duration).unwrap()
}

fn shared(name: &str) -> StoreMember {
    StoreMember::new(store_key(name), LockMode::Shared, None)
}

fn exclusive(name: &str) -> StoreMember {
    StoreMember::new(store_key(name), LockMode::Exclusive, Some(1))
}

fn owner(instance: &str) -> OwnerId {
    OwnerId::new("groups-test", instance).unwrap()
}

fn keys(members: &[StoreMember]) -> Vec<StoreKey> {
    members.iter().map(|member| member.key.clone()).collect()
}

/// A group as a waiting caller holds it: members, token, owner, ticket of its first
/// blocked attempt.
#[derive(Clone)]
struct Group {
    members: Vec<StoreMember>,
    token: Token,
    owner: OwnerId,
    ticket: Option<u64>,
}

impl Group {
    fn new(members: Vec<StoreMember>) -> Self {
        Self { members, token: Token::generate(), owner: owner("a"), ticket: None }
    }

    fn owned_by(mut self, owner: OwnerId) -> Self {
        self.owner = owner;
        self
    }

    fn keys(&self) -> Vec<StoreKey> {
        keys(&self.members)
    }

    /// One attempt that leaves intents when blocked (a waiting caller), remembering the ticket.
    async fn attempt(&mut self, store: &dyn GroupLockStore, lease: Duration) -> GroupAcquire {
        let request =
            GroupRequest::new(&self.members, &self.token, &self.owner, ttl(lease), Some(ttl(SOON)), self.ticket);
        let outcome = store.try_acquire_group(request).await.unwrap();
        if let GroupAcquire::Blocked { ticket } = outcome {
            assert!(self.ticket.is_none_or(|first| first == ticket), "a retry keeps its ticket");
            self.ticket = Some(ticket);
        }
        outcome
    }

    /// The request of the next waiting attempt (what `wait_for_change` checks).
    fn request(&self) -> GroupRequest<'_> {
        GroupRequest::new(&self.members, &self.token, &self.owner, ttl(LONG), Some(ttl(SOON)), self.ticket)
    }

    /// One attempt without intents (`try_lock`).
    async fn try_once(&self, store: &dyn GroupLockStore, lease: Duration) -> GroupAcquire {
        let request = GroupRequest::new(&self.members, &self.token, &self.owner, ttl(lease), None, None);
        store.try_acquire_group(request).await.unwrap()
    }

    async fn release(&self, store: &dyn GroupLockStore) -> usize {
        store.release_group(&self.keys(), &self.token).await.unwrap()
    }
}

fn granted(outcome: &GroupAcquire) -> bool {
    matches!(outcome, GroupAcquire::Acquired { .. })
}

/// The lowest score of a place in a name's `:h` set (the exclusive places' band).
const INTENT_BAND: &str = "20000000000000";
/// The band of places' tickets (`#token`): [3B, 4B); shared places follow it.
const TICKET_BAND: std::ops::Range<f64> = 3e13..4e13;

/// The places of waiting groups recorded on `name` (live or not yet purged), checking
/// that each has its ticket.
async fn intents(store: &RedisLockStore, name: &str) -> i64 {
    let h = format!("{}:h", group_key_stem(store, &store_key(name)));
    let entries: Vec<(String, f64)> = raw(store, &["ZRANGEBYSCORE", &h, INTENT_BAND, "+inf", "WITHSCORES"]).await;
    let (tickets, intents): (Vec<_>, Vec<_>) = entries.iter().partition(|(_, score)| TICKET_BAND.contains(score));
    assert_eq!(intents.len(), tickets.len(), "{name}: one ticket per intent: {entries:?}");
    for (token, _) in &intents {
        assert!(tickets.iter().any(|(ticket, _)| ticket.strip_prefix('#') == Some(token.as_str())), "{entries:?}");
    }
    i64::try_from(intents.len()).unwrap()
}

/// The groups' lease keys in the store: one per live group.
async fn lease_keys(store: &RedisLockStore) -> usize {
    let keys: Vec<String> = raw(store, &["KEYS", &format!("{}:group-lease:*", store.key_prefix())]).await;
    keys.len()
}

async fn holder_modes(store: &dyn GroupLockStore, name: &str) -> Vec<LockMode> {
    store.holders(&store_key(name)).await.unwrap().into_iter().map(|info| info.mode).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn writers_are_preferred_over_new_readers() {
    let Some(store) = shared_store("groups_writer_pref", RedisLockStore::builder()).await else { return };
    let groups = store.groups().expect("the Redis store has groups");
    let (r1, r2, r3) =
        (Group::new(vec![shared("doc")]), Group::new(vec![shared("doc")]), Group::new(vec![shared("doc")]));
    let mut w = Group::new(vec![exclusive("doc")]);

    assert!(granted(&r1.try_once(groups, LONG).await), "first reader");
    assert!(granted(&r2.try_once(groups, LONG).await), "second reader joins");
    assert!(!granted(&w.attempt(groups, LONG).await), "the writer waits for the readers");
    assert_eq!(intents(&store, "doc").await, 1, "the waiting writer left an intent");
    assert!(!granted(&r3.try_once(groups, LONG).await), "a new reader queues behind the writer's intent");
    assert_eq!(holder_modes(groups, "doc").await, [LockMode::Shared, LockMode::Shared]);

    assert_eq!(r1.release(groups).await, 1);
    assert!(!granted(&w.attempt(groups, LONG).await), "one reader is still in");
    assert_eq!(r2.release(groups).await, 1);
    assert!(granted(&w.attempt(groups, LONG).await), "the writer gets it once the readers left");
    assert_eq!(holder_modes(groups, "doc").await, [LockMode::Exclusive]);
    assert_eq!(intents(&store, "doc").await, 0, "a granted group's intents and tickets are gone");
    assert!(!granted(&r3.try_once(groups, LONG).await), "readers wait for the writer");
    assert_eq!(w.release(groups).await, 1);
    assert!(granted(&r3.try_once(groups, LONG).await));
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn each_holder_expires_on_its_own() {
    let Some(store) = shared_store("groups_expiry", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let (short, long) = (Group::new(vec![shared("data")]), Group::new(vec![shared("data")]));
    let mut writer = Group::new(vec![exclusive("data")]);
    assert!(granted(&short.try_once(groups, Duration::from_millis(300)).await));
    assert!(granted(&long.try_once(groups, LONG).await));
    assert!(!granted(&writer.attempt(groups, LONG).await));

    // Expiry is not signalled: waiting past the short lease is the only way to see it go.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let holders = groups.holders(&store_key("data")).await.unwrap();
    assert_eq!(holders.len(), 1, "only the short reader expired: {holders:?}");
    assert_eq!(&holders[0].token, &long.token);
    assert!(holders[0].ttl_left > Duration::from_secs(20), "the long reader kept its lease: {holders:?}");
    assert_eq!(groups.extend_group(&short.keys(), &short.token, ttl(LONG)).await.unwrap(), 0, "never revived");
    assert!(!granted(&writer.attempt(groups, LONG).await), "the long reader still holds");
    assert_eq!(long.release(groups).await, 1);
    assert!(granted(&writer.attempt(groups, LONG).await));
    assert_eq!(short.release(groups).await, 0, "an expired hold is not released");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocked_group_takes_nothing() {
    let Some(store) = shared_store("groups_all_or_nothing", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let holder = Group::new(vec![exclusive("b")]);
    assert!(granted(&holder.try_once(groups, LONG).await));

    let group = Group::new(vec![exclusive("a"), exclusive("b"), shared("c")]);
    assert!(!granted(&group.try_once(groups, LONG).await));
    for name in ["a", "c"] {
        assert!(groups.holders(&store_key(name)).await.unwrap().is_empty(), "{name} was not taken");
    }
    for name in ["a", "b", "c"] {
        assert_eq!(intents(&store, name).await, 0, "a single attempt leaves no intent on {name}");
    }
    for name in ["a", "c"] {
        let stem = group_key_stem(&store, &store_key(name));
        let left: i64 = raw(&store, &["EXISTS", &format!("{stem}:h")]).await;
        assert_eq!(left, 0, "no key written for {name}");
    }
    let lease: i64 = raw(&store, &["EXISTS", &group_lease_key(&store, &group.token)]).await;
    assert_eq!(lease, 0, "no lease key");

    assert_eq!(holder.release(groups).await, 1);
    assert!(granted(&group.try_once(groups, LONG).await), "all of it once b is free");
    assert_eq!(groups.holders(&store_key("c")).await.unwrap()[0].mode, LockMode::Shared);
    assert_eq!(group.release(groups).await, 3);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shared_permits_make_a_semaphore_and_changes_apply_to_the_next_grant() {
    let Some(store) = shared_store("groups_permits", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let slot = || Group::new(vec![StoreMember::new(store_key("pool"), LockMode::Shared, Some(2))]);
    let (a, b, c, d) = (slot(), slot(), slot(), slot());
    assert!(granted(&a.try_once(groups, LONG).await));
    assert!(granted(&b.try_once(groups, LONG).await));
    assert!(!granted(&c.try_once(groups, LONG).await), "two permits");

    let pool = store_key("pool");
    assert_eq!(groups.permits(&pool, LockMode::Shared).await.unwrap(), None);
    groups.set_permits(&pool, LockMode::Shared, Some(3)).await.unwrap();
    assert_eq!(groups.permits(&pool, LockMode::Shared).await.unwrap(), Some(3));
    assert_eq!(groups.permits(&pool, LockMode::Exclusive).await.unwrap(), None);
    assert!(granted(&c.try_once(groups, LONG).await), "the recorded permits beat the member's default");
    assert!(!granted(&d.try_once(groups, LONG).await));

    groups.set_permits(&pool, LockMode::Shared, Some(1)).await.unwrap();
    assert_eq!(groups.holders(&pool).await.unwrap().len(), 3, "holders beyond a lowered count keep their holds");
    assert_eq!(a.release(groups).await, 1);
    assert_eq!(b.release(groups).await, 1);
    assert!(!granted(&d.try_once(groups, LONG).await), "one permit, one holder");
    groups.set_permits(&pool, LockMode::Shared, None).await.unwrap();
    assert_eq!(groups.permits(&pool, LockMode::Shared).await.unwrap(), None);
    assert!(granted(&d.try_once(groups, LONG).await), "the member's default of 2 applies again");

    // Exclusive permits: two writers at once.
    groups.set_permits(&store_key("w2"), LockMode::Exclusive, Some(2)).await.unwrap();
    let (w1, w2, w3) =
        (Group::new(vec![exclusive("w2")]), Group::new(vec![exclusive("w2")]), Group::new(vec![exclusive("w2")]));
    assert!(granted(&w1.try_once(groups, LONG).await));
    assert!(granted(&w2.try_once(groups, LONG).await));
    assert!(!granted(&w3.try_once(groups, LONG).await));

    let zero = groups.set_permits(&pool, LockMode::Shared, Some(0)).await.unwrap_err();
    assert!(matches!(zero, LockError::InvalidGroup { reason: InvalidGroup::ZeroPermits { .. } }), "{zero}");
    let _: i64 = raw(&store, &["HSET", &format!("{}:p", group_key_stem(&store, &pool)), "shared", "many"]).await;
    let garbage = groups.permits(&pool, LockMode::Shared).await.unwrap_err();
    assert!(matches!(garbage, LockError::Store { .. }), "{garbage}");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn release_and_extend_report_what_they_did() {
    let Some(store) = shared_store("groups_release_twice", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let group = Group::new(vec![exclusive("x"), shared("y")]);
    assert!(granted(&group.try_once(groups, Duration::from_secs(5)).await));
    assert_eq!(groups.extend_group(&group.keys(), &group.token, ttl(LONG)).await.unwrap(), 2);
    let holders = groups.holders(&store_key("x")).await.unwrap();
    assert!(holders[0].ttl_left > Duration::from_secs(20), "{holders:?}");
    let stranger = Token::generate();
    assert_eq!(groups.extend_group(&group.keys(), &stranger, ttl(LONG)).await.unwrap(), 0);
    assert_eq!(groups.release_group(&group.keys(), &stranger).await.unwrap(), 0, "a foreign token frees nothing");
    assert_eq!(group.release(groups).await, 2);
    assert_eq!(group.release(groups).await, 0, "the second release frees nothing");
    assert_eq!(groups.extend_group(&group.keys(), &group.token, ttl(LONG)).await.unwrap(), 0);

    // Nothing is left: no holders, intents or lease keys.
    let left = keys_left(&store).await;
    assert!(left.is_empty(), "{left:?}");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_member_is_not_extended() {
    let Some(store) = shared_store("groups_extend_expired", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let group = Group::new(vec![exclusive("e1"), exclusive("e2")]);
    assert!(granted(&group.try_once(groups, Duration::from_millis(150)).await));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(groups.extend_group(&group.keys(), &group.token, ttl(LONG)).await.unwrap(), 0);
    assert!(groups.holders(&store_key("e1")).await.unwrap().is_empty());
    assert_eq!(group.release(groups).await, 0);
    let other = Group::new(vec![exclusive("e1")]);
    assert!(granted(&other.try_once(groups, LONG).await), "an expired hold is taken over");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn release_owner_frees_that_owner_only() {
    let Some(store) = shared_store("groups_release_owner", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let (mine, theirs) = (owner("replica-1"), owner("replica-10"));
    let a = Group::new(vec![exclusive("o1"), shared("o2")]).owned_by(mine.clone());
    let b = Group::new(vec![shared("o3")]).owned_by(mine.clone());
    let c = Group::new(vec![shared("o2"), exclusive("o4")]).owned_by(theirs.clone());
    for group in [&a, &b, &c] {
        assert!(granted(&group.try_once(groups, LONG).await));
    }
    let owners = groups.holders(&store_key("o2")).await.unwrap();
    let mut seen: Vec<_> = owners.iter().map(|info| info.owner.clone().unwrap()).collect();
    seen.sort();
    assert_eq!(seen, [mine.as_str(), theirs.as_str()]);

    assert_eq!(groups.release_owner(&mine).await.unwrap(), 3, "o1, o2 and o3");
    assert!(groups.holders(&store_key("o1")).await.unwrap().is_empty());
    assert!(groups.holders(&store_key("o3")).await.unwrap().is_empty());
    let o2 = groups.holders(&store_key("o2")).await.unwrap();
    assert_eq!((o2.len(), o2[0].owner.as_deref()), (1, Some(theirs.as_str())), "the other owner keeps its hold");
    assert_eq!(groups.holders(&store_key("o4")).await.unwrap().len(), 1);
    assert_eq!(groups.release_owner(&mine).await.unwrap(), 0, "nothing left");
    assert_eq!(a.release(groups).await, 0);
    assert_eq!(c.release(groups).await, 2);
    assert_eq!(groups.release_owner(&theirs).await.unwrap(), 0);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn releasing_some_names_keeps_the_others_held() {
    let Some(store) = shared_store("groups_partial_release", RedisLockStore::builder().fencing(true)).await else {
        return;
    };
    let groups = store.groups().unwrap();
    let me = owner("partial");
    let group = Group::new(vec![exclusive("p1"), shared("p2"), exclusive("p3")]).owned_by(me.clone());
    assert!(granted(&group.try_once(groups, Duration::from_secs(20)).await));
    let before: i64 = raw(&store, &["PTTL", &group_lease_key(&store, &group.token)]).await;
    assert_eq!(groups.release_group(&[store_key("p2")], &group.token).await.unwrap(), 1);
    assert!(groups.holders(&store_key("p2")).await.unwrap().is_empty());
    // The rest keeps its lease, its owner and its fence.
    let after: i64 = raw(&store, &["PTTL", &group_lease_key(&store, &group.token)]).await;
    assert!(after > 0 && after <= before, "lease key PTTL {before} → {after}");
    let held = groups.holders(&store_key("p3")).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].owner.as_deref(), Some(me.as_str()));
    assert!(held[0].fence.is_some_and(|fence| fence > 0), "{held:?}");
    assert_eq!(groups.extend_group(&[store_key("p1"), store_key("p3")], &group.token, ttl(LONG)).await.unwrap(), 2);
    assert_eq!(groups.release_owner(&me).await.unwrap(), 2, "release_owner finds the names left");
    assert_eq!(lease_keys(&store).await, 0);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn release_owner_pages_through_many_groups() {
    let Some(store) = shared_store("groups_release_owner_many", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let me = owner("busy");
    for i in 0..250 {
        let group = Group::new(vec![exclusive(&format!("n{i}"))]).owned_by(me.clone());
        assert!(granted(&group.try_once(groups, LONG).await));
    }
    assert_eq!(groups.release_owner(&me).await.unwrap(), 250);
    assert_eq!(lease_keys(&store).await, 0);
    cleanup(&store).await;
}

/// Redis Cluster's hash tag: the part between the first `{` and the first `}` after it,
/// when not empty; otherwise the whole key.
fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(close) = key[open + 1..].find('}') {
            if close > 0 {
                return &key[open + 1..open + 1 + close];
            }
        }
    }
    key
}

#[tokio::test(flavor = "multi_thread")]
async fn names_with_braces_keep_their_keys_in_one_hash_slot() {
    let Some(store) = shared_store("groups_braces", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let names = ["{a}", "a}b{", "}{", "{", "}", "%7B", "%", "plain", "{}"];
    let mut tags = BTreeSet::new();
    for name in names {
        let key = store_key(name);
        let stem = group_key_stem(&store, &key);
        let mut writer = Group::new(vec![exclusive(name)]);
        let reader = Group::new(vec![shared(name)]);
        assert!(granted(&reader.try_once(groups, LONG).await), "{name}");
        assert!(!granted(&writer.attempt(groups, LONG).await), "{name}: intent recorded");
        groups.set_permits(&key, LockMode::Shared, Some(5)).await.unwrap();
        let found: Vec<String> = raw(&store, &["KEYS", &format!("{}*", redis_glob_escape(&stem))]).await;
        let found: BTreeSet<String> = found.into_iter().collect();
        // The reader's hold (it found the name free), the writer's place, the permits.
        let expected: BTreeSet<String> = [":s", ":h", ":p"].iter().map(|part| format!("{stem}{part}")).collect();
        assert_eq!(found, expected, "{name}");
        let tag = hash_tag(&stem);
        for key in &found {
            assert_eq!(hash_tag(key), tag, "{key}: one slot per name");
        }
        assert!(!tag.contains(['{', '}']), "{tag}");
        assert!(tags.insert(tag.to_owned()), "{name}: its own tag");
        assert_eq!(groups.holders(&key).await.unwrap().len(), 1, "{name}");
    }
    for name in names {
        let holders = groups.holders(&store_key(name)).await.unwrap();
        assert_eq!(holders.len(), 1, "{name}: names never share keys");
    }
    cleanup(&store).await;
}

fn redis_glob_escape(text: &str) -> String {
    text.chars().flat_map(|c| if "*?[]\\".contains(c) { vec!['\\', c] } else { vec![c] }).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_of_the_largest_size_works_and_a_larger_one_is_refused_before_io() {
    let Some(store) = shared_store("groups_large", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    assert_eq!(groups.max_group(), 64);
    let members: Vec<StoreMember> =
        (0..64).map(|i| if i % 2 == 0 { exclusive(&format!("m{i}")) } else { shared(&format!("m{i}")) }).collect();
    let group = Group::new(members);
    assert!(granted(&group.try_once(groups, LONG).await));
    for (i, member) in group.members.iter().enumerate() {
        let holders = groups.holders(&member.key).await.unwrap();
        assert_eq!((holders.len(), holders[0].mode), (1, member.mode), "member {i}");
    }
    let clash = Group::new(vec![shared("m63"), shared("m0")]);
    assert!(!granted(&clash.try_once(groups, LONG).await), "m0 is held exclusively");
    assert_eq!(groups.extend_group(&group.keys(), &group.token, ttl(LONG)).await.unwrap(), 64);
    assert_eq!(group.release(groups).await, 64);
    assert!(granted(&clash.try_once(groups, LONG).await));

    // One more member: refused by a store whose server does not even exist.
    let client = distlock_redis::redis::Client::open("redis://127.0.0.1:1").unwrap();
    let conn = ConnectionManager::new_lazy_with_config(client, Default::default()).unwrap();
    let offline = RedisLockStore::builder().build(conn).unwrap();
    let too_many: Vec<StoreMember> = (0..65).map(|i| shared(&format!("m{i}"))).collect();
    let (token, me) = (Token::generate(), owner("a"));
    let request = GroupRequest::new(&too_many, &token, &me, ttl(LONG), None, None);
    let err = offline.try_acquire_group(request).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidGroup { reason: InvalidGroup::TooLarge { len: 65, max: 64 } }), "{err}");
    let twice = [shared("d"), exclusive("d")];
    let err = offline.try_acquire_group(GroupRequest::new(&twice, &token, &me, ttl(LONG), None, None)).await;
    assert!(matches!(err, Err(LockError::InvalidGroup { reason: InvalidGroup::DuplicateName { .. } })), "{err:?}");
    let err = offline.try_acquire_group(GroupRequest::new(&[], &token, &me, ttl(LONG), None, None)).await;
    assert!(matches!(err, Err(LockError::InvalidGroup { reason: InvalidGroup::Empty })), "{err:?}");
    let zero = [StoreMember::new(store_key("z"), LockMode::Shared, Some(0))];
    let err = offline.try_acquire_group(GroupRequest::new(&zero, &token, &me, ttl(LONG), None, None)).await;
    assert!(matches!(err, Err(LockError::InvalidGroup { reason: InvalidGroup::ZeroPermits { .. } })), "{err:?}");
    let err = offline.release_group(&keys(&too_many), &token).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidGroup { .. }), "{err}");
    cleanup(&store).await;
}

/// Drives one waiting group to completion: attempt with its ticket, wait for a change,
/// again; once granted, hold briefly and release.
async fn run_to_completion(store: Arc<RedisLockStore>, mut group: Group) -> usize {
    let mut attempts = 0;
    loop {
        attempts += 1;
        if granted(&group.attempt(&*store, LONG).await) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(group.release(&*store).await, group.members.len());
            return attempts;
        }
        store.wait_for_change(group.request(), Duration::from_millis(200)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn crossed_waiting_groups_both_finish() {
    let Some(store) = shared_store("groups_crossed", RedisLockStore::builder()).await else { return };
    let store = Arc::new(store);
    for round in 0..5 {
        // A reader on both names makes each group wait and leave its intent first.
        let reader = Group::new(vec![shared("a"), shared("b")]);
        assert!(granted(&reader.try_once(&*store, LONG).await));
        let mut g1 = Group::new(vec![exclusive("a"), shared("b")]);
        let mut g2 = Group::new(vec![exclusive("b"), shared("a")]);
        assert!(!granted(&g1.attempt(&*store, LONG).await));
        assert!(!granted(&g2.attempt(&*store, LONG).await));
        let first = tokio::spawn(run_to_completion(Arc::clone(&store), g1));
        let second = tokio::spawn(run_to_completion(Arc::clone(&store), g2));
        assert_eq!(reader.release(&*store).await, 2);
        let both = async { (first.await.unwrap(), second.await.unwrap()) };
        let attempts = tokio::time::timeout(Duration::from_secs(20), both).await;
        let attempts = attempts.unwrap_or_else(|_| panic!("round {round}: the crossed groups blocked each other"));
        eprintln!("round {round}: attempts {attempts:?}");
    }
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn withdrawn_or_expired_intents_let_readers_in() {
    let Some(store) = shared_store("groups_intents", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let holder = Group::new(vec![shared("i")]);
    assert!(granted(&holder.try_once(groups, LONG).await));
    let mut writer = Group::new(vec![exclusive("i")]);
    assert!(!granted(&writer.attempt(groups, LONG).await));
    let reader = Group::new(vec![shared("i")]);
    assert!(!granted(&reader.try_once(groups, LONG).await));
    groups.withdraw_intents(&writer.keys(), &writer.token).await.unwrap();
    assert!(granted(&reader.try_once(groups, LONG).await), "the writer gave up");
    assert_eq!(reader.release(groups).await, 1);

    let request = GroupRequest::new(
        &writer.members,
        &writer.token,
        &writer.owner,
        ttl(LONG),
        Some(ttl(Duration::from_millis(200))),
        None,
    );
    assert!(!granted(&groups.try_acquire_group(request).await.unwrap()));
    assert!(!granted(&reader.try_once(groups, LONG).await));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(granted(&reader.try_once(groups, LONG).await), "the intent expired");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_wakes_a_waiting_group() {
    let Some(store) = shared_store("groups_wake", RedisLockStore::builder().release_notifications(true)).await else {
        return;
    };
    assert!(store.capabilities().release_notifications);
    let store = Arc::new(store);
    let holder = Group::new(vec![exclusive("w")]);
    assert!(granted(&holder.try_once(&*store, LONG).await));
    let group = Group::new(vec![exclusive("other"), exclusive("w")]);
    let waiter = tokio::spawn({
        let store = Arc::clone(&store);
        async move {
            let started = tokio::time::Instant::now();
            store.wait_for_change(group.request(), LONG).await.unwrap();
            started.elapsed()
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "nothing changed yet");
    assert_eq!(holder.release(&*store).await, 1);
    let waited = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken by the release").unwrap();
    assert!(waited < Duration::from_secs(5), "{waited:?}");

    // Every name idle: no wait at all.
    let started = tokio::time::Instant::now();
    store.wait_for_change(Group::new(vec![exclusive("w")]).request(), LONG).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_notifications_a_wait_sleeps_max() {
    let builder = RedisLockStore::builder().release_notifications(false);
    let Some(store) = shared_store("groups_no_notify", builder).await else { return };
    let started = tokio::time::Instant::now();
    store.wait_for_change(Group::new(vec![exclusive("q")]).request(), Duration::from_millis(200)).await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(5), "{waited:?}");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn holders_report_mode_owner_fence_and_time_left() {
    let url = match distlock_conformance::kit::redis_url("groups holders") {
        Some(url) => url,
        None => return,
    };
    // The fencing counter is never deleted: a prefix of its own keeps it apart.
    let prefix = common::unique_prefix("groups_fence");
    let store = RedisLockStore::builder().key_prefix(&prefix).fencing(true).connect(&url).await.unwrap();
    let single = store.try_acquire(&store_key("f"), &Token::generate(), ttl(LONG)).await.unwrap();
    let distlock_api::Acquire::Acquired { fence: Some(single) } = single else { panic!("{single:?}") };

    let mut last = single;
    for _ in 0..3 {
        let group = Group::new(vec![exclusive("f"), shared("g")]).owned_by(owner("fenced"));
        let GroupAcquire::Acquired { fence: Some(fence) } = group.try_once(&store, Duration::from_secs(20)).await
        else {
            panic!("not granted")
        };
        assert!(fence > last, "{fence} > {last}");
        last = fence;
        let holders = store.holders(&store_key("g")).await.unwrap();
        assert_eq!(holders.len(), 1);
        let info = &holders[0];
        assert_eq!((&info.token, info.fence, info.mode), (&group.token, Some(fence), LockMode::Shared));
        assert_eq!(info.owner.as_deref(), Some("groups-test@fenced"));
        assert!(info.ttl_left <= Duration::from_secs(20) && info.ttl_left > Duration::from_secs(10), "{info:?}");
        assert_eq!(group.release(&store).await, 2);
    }

    // Without fencing: no number.
    let Some(plain) = shared_store("groups_unfenced", RedisLockStore::builder()).await else { return };
    let group = Group::new(vec![shared("f")]);
    assert_eq!(group.try_once(&plain, LONG).await, GroupAcquire::Acquired { fence: None });
    assert_eq!(plain.holders(&store_key("f")).await.unwrap()[0].fence, None);
    cleanup(&plain).await;
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_expire_with_their_last_lease() {
    let Some(store) = shared_store("groups_gc", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let group = Group::new(vec![exclusive("gc")]);
    assert!(granted(&group.try_once(groups, Duration::from_secs(20)).await));
    let stem = group_key_stem(&store, &store_key("gc"));
    // A name taken free is a string that lives exactly as long as its hold.
    let pttl: i64 = raw(&store, &["PTTL", &format!("{stem}:s")]).await;
    assert!((19_000..=20_000).contains(&pttl), "{stem}:s: PTTL {pttl}");
    // A sorted set's expiry only grows, by twice the TTL when it must: at least the lease,
    // at most one TTL more.
    let (in_s, in_h) = (Group::new(vec![shared("gc3")]), Group::new(vec![shared("gc3")]));
    assert!(granted(&in_s.try_once(groups, Duration::from_secs(20)).await));
    assert!(granted(&in_h.try_once(groups, Duration::from_secs(20)).await));
    assert!(
        !granted(&Group::new(vec![shared("gc")]).try_once(groups, Duration::from_secs(20)).await),
        "gc is held exclusively"
    );
    let gc3 = group_key_stem(&store, &store_key("gc3"));
    let pttl: i64 = raw(&store, &["PTTL", &format!("{gc3}:h")]).await;
    assert!((19_000..=40_000).contains(&pttl), "{gc3}:h: PTTL {pttl}");
    // The lease key lives exactly as long as the group's lease.
    let pttl: i64 = raw(&store, &["PTTL", &group_lease_key(&store, &group.token)]).await;
    assert!((19_000..=20_000).contains(&pttl), "lease key: PTTL {pttl}");
    // A group whose lease ran out leaves nothing: its name's key and its lease key are gone.
    let short = Group::new(vec![shared("gc2")]).owned_by(owner("gone"));
    assert!(granted(&short.try_once(groups, Duration::from_millis(100)).await));
    tokio::time::sleep(Duration::from_millis(250)).await;
    for part in [":h", ":s"] {
        let gone: i64 = raw(&store, &["EXISTS", &format!("{}{part}", group_key_stem(&store, &store_key("gc2")))]).await;
        assert_eq!(gone, 0, "{part}");
    }
    let gone: i64 = raw(&store, &["EXISTS", &group_lease_key(&store, &short.token)]).await;
    assert_eq!(gone, 0, "the expired group's lease key");
    assert_eq!(groups.release_owner(&owner("gone")).await.unwrap(), 0);
    assert_eq!(short.release(groups).await, 0, "an expired group frees nothing");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scripts_are_resent_after_script_flush() {
    let Some(server) = RedisServer::start_or_skip("groups noscript") else { return };
    let store = RedisLockStore::connect(&server.url()).await.unwrap();
    let group = Group::new(vec![exclusive("s"), shared("t")]);
    assert!(granted(&group.try_once(&store, LONG).await));
    tokio::task::block_in_place(|| server.script_flush());
    assert_eq!(store.extend_group(&group.keys(), &group.token, ttl(LONG)).await.unwrap(), 2);
    tokio::task::block_in_place(|| server.script_flush());
    assert_eq!(store.holders(&store_key("s")).await.unwrap().len(), 1);
    tokio::task::block_in_place(|| server.script_flush());
    assert_eq!(group.release(&store).await, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_returns_at_once_when_the_request_could_be_granted_now() {
    let Some(store) = shared_store("groups_probe", RedisLockStore::builder().release_notifications(true)).await else {
        return;
    };
    let store = Arc::new(store);
    // A waiting writer, its intents recorded; the reader that blocked it leaves before the
    // writer waits, so no published release reaches the wait: the check after the
    // registration must see it, though the writer's own intent is still on the name.
    let reader = Group::new(vec![shared("p")]);
    assert!(granted(&reader.try_once(&*store, LONG).await));
    let mut writer = Group::new(vec![exclusive("p"), exclusive("p2")]);
    assert!(!granted(&writer.attempt(&*store, LONG).await));
    assert_eq!(reader.release(&*store).await, 1);
    assert_eq!(intents(&store, "p").await, 1);
    let wait = store.wait_for_change(writer.request(), LONG);
    tokio::time::timeout(Duration::from_secs(5), wait).await.expect("no wait: the writer can go").unwrap();
    assert!(granted(&writer.attempt(&*store, LONG).await));
    assert_eq!(writer.release(&*store).await, 2);

    // A reader that started waiting after a writer's intent (a later ticket) is held back
    // by it: its wait is not cut short.
    let holder = Group::new(vec![shared("q")]);
    assert!(granted(&holder.try_once(&*store, LONG).await));
    let mut writer = Group::new(vec![exclusive("q")]);
    assert!(!granted(&writer.attempt(&*store, LONG).await));
    // Tickets are milliseconds: the reader's must be later than the writer's.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut late = Group::new(vec![shared("q")]);
    assert!(!granted(&late.attempt(&*store, LONG).await));
    assert!(late.ticket > writer.ticket, "{:?} > {:?}", late.ticket, writer.ticket);
    let started = tokio::time::Instant::now();
    store.wait_for_change(late.request(), Duration::from_millis(300)).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(290), "the writer's intent holds the reader back");
    // …while a reader waiting since before the writer's intent (an older ticket) is not.
    let mut early = late.clone();
    early.token = Token::generate();
    early.ticket = writer.ticket.map(|ticket| ticket - 1);
    let wait = store.wait_for_change(early.request(), LONG);
    tokio::time::timeout(Duration::from_secs(5), wait).await.expect("the older reader can go").unwrap();
    assert_eq!(holder.release(&*store).await, 1);
    store.withdraw_intents(&writer.keys(), &writer.token).await.unwrap();
    assert_eq!(intents(&store, "q").await, 1, "the waiting reader's place is left");
    assert_eq!(store.waiting(&store_key("q")).await.unwrap(), 1);
    store.withdraw_intents(&late.keys(), &late.token).await.unwrap();
    assert_eq!(intents(&store, "q").await, 0);
    cleanup(&store).await;
}

/// The probe of a request that could be granted writes nothing (a blocked request's
/// writes only its waited-for mark: `a_release_publishes_for_the_mark_of_a_blocked_waiter_and_wakes_it`).
#[tokio::test(flavor = "multi_thread")]
async fn a_probe_writes_nothing() {
    let builder = RedisLockStore::builder().fencing(true).release_notifications(true);
    let Some(store) = shared_store("groups_probe_ro", builder).await else { return };
    let group = Group::new(vec![exclusive("f"), shared("g")]);
    let wait = store.wait_for_change(group.request(), LONG);
    tokio::time::timeout(Duration::from_secs(5), wait).await.expect("free names: no wait").unwrap();
    let left = keys_left(&store).await;
    assert!(left.is_empty(), "no fence drawn, nothing held, nothing indexed: {left:?}");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_of_several_names_wakes_the_waiters_of_each() {
    let Some(store) = shared_store("groups_wake_many", RedisLockStore::builder().release_notifications(true)).await
    else {
        return;
    };
    let store = Arc::new(store);
    let holder = Group::new(vec![exclusive("m1"), exclusive("m2"), shared("m3")]);
    assert!(granted(&holder.try_once(&*store, LONG).await));
    let waiters: Vec<_> = ["m1", "m2", "m3"]
        .into_iter()
        .map(|name| {
            let (store, mut group) = (Arc::clone(&store), Group::new(vec![exclusive(name)]));
            tokio::spawn(async move {
                assert!(!granted(&group.attempt(&*store, LONG).await));
                store.wait_for_change(group.request(), LONG).await.unwrap();
                granted(&group.attempt(&*store, LONG).await)
            })
        })
        .collect();
    // Each waiter is blocked (its intent is recorded) before the release.
    for name in ["m1", "m2", "m3"] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while intents(&store, name).await == 0 {
            assert!(tokio::time::Instant::now() < deadline, "{name}: the waiter never attempted");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert_eq!(holder.release(&*store).await, 3);
    for waiter in waiters {
        let woken = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken by the release");
        assert!(woken.unwrap(), "granted once woken");
    }
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_index_and_the_name_keys_do_not_grow_over_many_cycles() {
    let Some(store) = shared_store("groups_no_growth", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let me = owner("cycling");
    let keeper = Group::new(vec![shared("k")]).owned_by(me.clone());
    assert!(granted(&keeper.try_once(groups, LONG).await));
    for i in 0..300 {
        // A writer blocked by the keeper (its intents recorded), a reader of two other
        // names granted and released, the writer giving up; and a write cycle.
        let mut writer = Group::new(vec![exclusive("k"), exclusive(&format!("c{}", i % 3))]).owned_by(me.clone());
        assert!(!granted(&writer.attempt(groups, LONG).await));
        let reader = Group::new(vec![shared("c3"), shared("c4")]).owned_by(me.clone());
        assert!(granted(&reader.try_once(groups, LONG).await));
        assert_eq!(reader.release(groups).await, 2);
        groups.withdraw_intents(&writer.keys(), &writer.token).await.unwrap();
        let cycle = Group::new(vec![exclusive(&format!("c{}", i % 3)), shared("c4")]).owned_by(me.clone());
        assert!(granted(&cycle.try_once(groups, LONG).await));
        assert_eq!(cycle.release(groups).await, 2);
    }
    assert_eq!(lease_keys(&store).await, 1, "only the keeper has a lease key");
    let stem = group_key_stem(&store, &store_key("k"));
    // Only the keeper's hold is left on k (in `s`: it found k free): no intent, no ticket.
    let mut left = keys_left(&store).await;
    left.sort();
    let mut expected = vec![format!("{stem}:s"), group_lease_key(&store, &keeper.token)];
    expected.sort();
    assert_eq!(left, expected);
    assert_eq!(groups.release_owner(&me).await.unwrap(), 1);
    let left = keys_left(&store).await;
    assert!(left.is_empty(), "nothing left without a group: {left:?}");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn release_owner_matches_the_owner_exactly() {
    let Some(store) = shared_store("groups_owner_glob", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let (glob, other, longer) = (owner("x*"), owner("xy"), owner("x*y"));
    for (i, who) in [&glob, &other, &longer].into_iter().enumerate() {
        let group = Group::new(vec![exclusive(&format!("g{i}"))]).owned_by(who.clone());
        assert!(granted(&group.try_once(groups, LONG).await));
    }
    assert_eq!(groups.release_owner(&glob).await.unwrap(), 1, "a glob character in the owner is literal");
    assert!(groups.holders(&store_key("g0")).await.unwrap().is_empty());
    assert_eq!(groups.holders(&store_key("g1")).await.unwrap().len(), 1);
    assert_eq!(groups.holders(&store_key("g2")).await.unwrap().len(), 1);
    assert_eq!(groups.release_owner(&longer).await.unwrap(), 1);
    assert_eq!(groups.release_owner(&other).await.unwrap(), 1);
    cleanup(&store).await;
}

/// `name`'s `:h` key (a sorted set) and `:s` key (the string of a holder that took it free).
fn h_key(store: &RedisLockStore, name: &str) -> String {
    format!("{}:h", group_key_stem(store, &store_key(name)))
}

fn s_key(store: &RedisLockStore, name: &str) -> String {
    format!("{}:s", group_key_stem(store, &store_key(name)))
}

async fn exists(store: &RedisLockStore, key: &str) -> bool {
    raw::<i64>(store, &["EXISTS", key]).await == 1
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_of_free_names_holds_each_in_a_string() {
    let Some(store) = shared_store("groups_strings", RedisLockStore::builder().fencing(true)).await else { return };
    let groups = store.groups().unwrap();
    let me = owner("strings");
    let group = Group::new(vec![exclusive("s1"), shared("s2")]).owned_by(me.clone());
    assert!(granted(&group.try_once(groups, Duration::from_secs(5)).await));
    for (name, mode, value) in [
        ("s1", LockMode::Exclusive, group.token.as_str().to_owned()),
        ("s2", LockMode::Shared, format!("+{}", group.token.as_str())),
    ] {
        assert!(!exists(&store, &h_key(&store, name)).await, "{name}: no sorted set");
        let holder: String = raw(&store, &["GET", &s_key(&store, name)]).await;
        assert_eq!(holder, value, "{name}: the token, `+` before it for a shared hold");
        let left: i64 = raw(&store, &["PTTL", &s_key(&store, name)]).await;
        assert!(left > 0 && left <= 5_000, "{name}: PTTL {left}");
        let held = groups.holders(&store_key(name)).await.unwrap();
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].token.as_str(), group.token.as_str());
        assert_eq!((held[0].mode, held[0].owner.as_deref()), (mode, Some(me.as_str())));
        assert!(held[0].fence.is_some_and(|fence| fence > 0), "{held:?}");
        assert!(held[0].ttl_left <= Duration::from_secs(5), "{held:?}");
    }
    let entry: String = raw(&store, &["GET", &group_lease_key(&store, &group.token)]).await;
    assert!(entry.ends_with("\n-"), "the lease of a group held in strings has no expiry of its own: {entry:?}");

    // Extending moves both strings and the lease; another group is refused meanwhile.
    assert_eq!(groups.extend_group(&group.keys(), &group.token, ttl(LONG)).await.unwrap(), 2);
    for key in [s_key(&store, "s1"), s_key(&store, "s2"), group_lease_key(&store, &group.token)] {
        let left: i64 = raw(&store, &["PTTL", &key]).await;
        assert!(left > 5_000 && left <= 30_000, "{key}: PTTL {left} after extending to 30 s");
    }
    assert!(!granted(&Group::new(vec![exclusive("s1")]).try_once(groups, LONG).await));
    assert!(!granted(&Group::new(vec![exclusive("s2")]).try_once(groups, LONG).await));
    assert_eq!(group.release(groups).await, 2);
    for name in ["s1", "s2"] {
        assert!(!exists(&store, &s_key(&store, name)).await, "{name} is free again");
        assert!(!exists(&store, &h_key(&store, name)).await, "{name} is free again");
    }
    assert_eq!(lease_keys(&store).await, 0);
    assert_eq!(group.release(groups).await, 0, "a second release frees nothing");
    assert_eq!(groups.extend_group(&group.keys(), &group.token, ttl(LONG)).await.unwrap(), 0);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_in_a_string_counts_beside_the_sorted_set_of_the_others() {
    let Some(store) = shared_store("groups_strings_beside", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let holder = Group::new(vec![exclusive("c1"), exclusive("c2")]);
    assert!(granted(&holder.try_once(groups, LONG).await));
    assert!(
        !granted(&Group::new(vec![shared("c2")]).try_once(groups, LONG).await),
        "the writer's string keeps readers out"
    );
    let mut writer = Group::new(vec![exclusive("c1")]);
    assert!(!granted(&writer.attempt(groups, LONG).await), "the holder's string keeps the writer out");
    assert_eq!(intents(&store, "c1").await, 1, "the writer's place is recorded beside the holder's string");
    let held = groups.holders(&store_key("c1")).await.unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!((held[0].token.as_str(), held[0].mode), (holder.token.as_str(), LockMode::Exclusive));
    assert!(held[0].ttl_left > LONG - SOON && held[0].ttl_left <= LONG, "{held:?}");

    assert_eq!(groups.extend_group(&holder.keys(), &holder.token, ttl(LONG)).await.unwrap(), 2);
    assert_eq!(holder.release(groups).await, 2);
    assert!(granted(&writer.attempt(groups, LONG).await), "the writer gets the name");
    assert!(!exists(&store, &s_key(&store, "c1")).await, "a name that was not free is granted in its sorted set");
    assert_eq!(holder_modes(groups, "c1").await, [LockMode::Exclusive]);
    assert_eq!(writer.release(groups).await, 1);

    // A reader in `s`, a second reader in `h`: both count, for writers and for permits.
    let (first, second) = (Group::new(vec![shared("c3")]), Group::new(vec![shared("c3")]));
    assert!(granted(&first.try_once(groups, LONG).await));
    assert!(granted(&second.try_once(groups, LONG).await), "readers share");
    assert!(exists(&store, &s_key(&store, "c3")).await && exists(&store, &h_key(&store, "c3")).await);
    assert_eq!(holder_modes(groups, "c3").await, [LockMode::Shared, LockMode::Shared]);
    assert!(!granted(&Group::new(vec![exclusive("c3")]).try_once(groups, LONG).await), "no writer beside readers");
    groups.set_permits(&store_key("c3"), LockMode::Shared, Some(2)).await.unwrap();
    assert!(!granted(&Group::new(vec![shared("c3")]).try_once(groups, LONG).await), "two permits, two readers");
    assert_eq!(groups.extend_group(&first.keys(), &first.token, ttl(LONG)).await.unwrap(), 1);
    assert_eq!((first.release(groups).await, second.release(groups).await), (1, 1));
    assert_eq!(lease_keys(&store).await, 0);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn releasing_some_names_of_a_group_held_in_strings_keeps_the_others_and_their_lease() {
    let Some(store) = shared_store("groups_strings_partial", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let me = owner("strings-partial");
    let group = Group::new(vec![exclusive("q1"), shared("q2"), exclusive("q3")]).owned_by(me.clone());
    assert!(granted(&group.try_once(groups, Duration::from_secs(20)).await));
    let lease = group_lease_key(&store, &group.token);
    let before: i64 = raw(&store, &["PTTL", &lease]).await;
    // The lease comes back with what the released name had left.
    assert_eq!(groups.release_group(&[store_key("q2")], &group.token).await.unwrap(), 1);
    assert!(!exists(&store, &s_key(&store, "q2")).await);
    let after: i64 = raw(&store, &["PTTL", &lease]).await;
    assert!(after > 0 && after <= before, "lease PTTL {before} → {after}");
    // A name of another group is not released by this one's token.
    let other = Group::new(vec![exclusive("q4")]);
    assert!(granted(&other.try_once(groups, LONG).await));
    assert_eq!(groups.release_group(&[store_key("q1"), store_key("q4")], &group.token).await.unwrap(), 1);
    assert!(exists(&store, &s_key(&store, "q4")).await, "q4 is still the other group's");
    let held = groups.holders(&store_key("q3")).await.unwrap();
    assert_eq!((held.len(), held[0].owner.as_deref()), (1, Some(me.as_str())), "{held:?}");
    assert_eq!(groups.release_owner(&me).await.unwrap(), 1, "release_owner finds the name left");
    assert_eq!(other.release(groups).await, 1);
    assert_eq!(lease_keys(&store).await, 0);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_release_of_an_expired_group_held_in_strings_leaves_the_next_holder_alone() {
    let Some(store) = shared_store("groups_strings_late", RedisLockStore::builder()).await else { return };
    let groups = store.groups().unwrap();
    let first = Group::new(vec![exclusive("l1"), shared("l2")]);
    assert!(granted(&first.try_once(groups, Duration::from_millis(200)).await));
    let deadline = std::time::Instant::now() + SOON;
    while lease_keys(&store).await > 0 {
        assert!(std::time::Instant::now() < deadline, "the 200 ms lease never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let next = Group::new(vec![exclusive("l1"), shared("l2")]);
    assert!(granted(&next.try_once(groups, LONG).await), "the names expired with the first group");
    assert_eq!(first.release(groups).await, 0, "the first group's release frees nothing");
    assert_eq!(groups.extend_group(&first.keys(), &first.token, ttl(LONG)).await.unwrap(), 0);
    let holder: String = raw(&store, &["GET", &s_key(&store, "l1")]).await;
    assert_eq!(holder, next.token.as_str(), "l1 is still the next group's");
    assert_eq!(next.release(groups).await, 2);
    cleanup(&store).await;
}

/// `name`'s waited-for mark: the `:w` key a blocked waiter's probe writes.
fn mark_key(store: &RedisLockStore, name: &str) -> String {
    format!("{}:w", group_key_stem(store, &store_key(name)))
}

/// A subscriber of its own on the store's release channel, apart from the store's
/// listener: it sees every message a release publishes.
struct Published {
    channel: String,
    messages: distlock_redis::redis::aio::PubSubStream,
}

impl Published {
    async fn subscribe(store: &RedisLockStore, url: &str) -> Self {
        let channel = common::release_channel(store);
        let client = distlock_redis::redis::Client::open(url).unwrap();
        let mut pubsub = client.get_async_pubsub().await.unwrap();
        pubsub.subscribe(&channel).await.unwrap();
        Self { channel, messages: pubsub.into_on_message() }
    }

    /// The messages published on the channel since the last call: it publishes a sentinel
    /// of its own and collects what arrives before it. The server delivers one channel's
    /// messages in the order it ran the publishes, so whatever a release published before
    /// the sentinel was sent comes first.
    async fn since_last(&mut self, store: &RedisLockStore) -> Vec<String> {
        use futures_util::StreamExt;
        let sentinel = format!("sentinel {}", Token::generate().as_str());
        let receivers: i64 = raw(store, &["PUBLISH", &self.channel, &sentinel]).await;
        assert!(receivers >= 1, "the subscriber is subscribed");
        let mut before = Vec::new();
        loop {
            let message = tokio::time::timeout(SOON, self.messages.next()).await;
            let message = message.expect("the sentinel arrives").expect("the subscription is open");
            let payload: String = message.get_payload().unwrap();
            if payload == sentinel {
                return before;
            }
            before.push(payload);
        }
    }
}

/// A release with notifications on publishes only when someone may wait for one of its
/// names: never for an uncontended group (held in strings, held in the sorted set beside
/// another reader, released whole or in part), while the store's own listener is up as
/// it is after any waiting acquisition; but for a name where a waiting group left its
/// place.
#[tokio::test(flavor = "multi_thread")]
async fn an_uncontended_group_release_publishes_nothing() {
    let test = "groups_quiet_release";
    let Some(url) = distlock_conformance::kit::redis_url(test) else { return };
    let store = RedisLockStore::builder().key_prefix(common::unique_prefix(test)).release_notifications(true);
    let store = store.connect(&url).await.unwrap();
    let mut published = Published::subscribe(&store, &url).await;
    // The store's own listener comes up with a wait (at once: the name is free).
    store.wait_for_change(Group::new(vec![exclusive("idle")]).request(), LONG).await.unwrap();
    assert_eq!(published.since_last(&store).await, Vec::<String>::new(), "a wait publishes nothing");

    for _ in 0..3 {
        let cycle = Group::new(vec![exclusive("u1"), shared("u2")]);
        assert!(granted(&cycle.try_once(&store, LONG).await));
        assert_eq!(cycle.release(&store).await, 2);
    }
    let part = Group::new(vec![exclusive("u1"), exclusive("u3")]);
    assert!(granted(&part.try_once(&store, LONG).await));
    assert_eq!(store.release_group(&[store_key("u3")], &part.token).await.unwrap(), 1);
    assert_eq!(part.release(&store).await, 1);
    // Readers in `s` and in `h`: the one in `s` leaves first, beside the other's hold in
    // `h` (a sorted set without places).
    let (first, second) = (Group::new(vec![shared("u4")]), Group::new(vec![shared("u4")]));
    assert!(granted(&first.try_once(&store, LONG).await));
    assert!(granted(&second.try_once(&store, LONG).await));
    assert!(exists(&store, &h_key(&store, "u4")).await, "the second reader is in the sorted set");
    assert_eq!((first.release(&store).await, second.release(&store).await), (1, 1));
    assert_eq!(published.since_last(&store).await, Vec::<String>::new(), "nobody waited: no message");

    // A waiting writer's place on a name makes its release publish, naming its names.
    let reader = Group::new(vec![shared("u5"), shared("u6")]);
    assert!(granted(&reader.try_once(&store, LONG).await));
    let mut writer = Group::new(vec![exclusive("u5")]);
    assert!(!granted(&writer.attempt(&store, LONG).await));
    assert_eq!(intents(&store, "u5").await, 1);
    assert!(!exists(&store, &mark_key(&store, "u5")).await, "an attempt leaves a place, no mark");
    assert_eq!(reader.release(&store).await, 2);
    assert_eq!(published.since_last(&store).await, [format!("{}\n{}", h_key(&store, "u5"), h_key(&store, "u6"))]);
    store.withdraw_intents(&writer.keys(), &writer.token).await.unwrap();
    assert_eq!(published.since_last(&store).await.len(), 1, "a withdrawal that removes places publishes");
    cleanup(&store).await;
}

/// A waiter that left no place (it never attempted: no intent on any name) is woken by
/// the release all the same: its probe marked the name that blocked it, so the release
/// published — once, deleting the mark — well within the waiter's 10 s.
#[tokio::test(flavor = "multi_thread")]
async fn a_release_publishes_for_the_mark_of_a_blocked_waiter_and_wakes_it() {
    let test = "groups_marked_release";
    let Some(url) = distlock_conformance::kit::redis_url(test) else { return };
    let store = RedisLockStore::builder().key_prefix(common::unique_prefix(test)).release_notifications(true);
    let store = Arc::new(store.connect(&url).await.unwrap());
    let mut published = Published::subscribe(&store, &url).await;
    let holder = Group::new(vec![exclusive("m")]);
    assert!(granted(&holder.try_once(&*store, LONG).await));
    let wait = Duration::from_secs(10);
    let waiter = tokio::spawn({
        let store = Arc::clone(&store);
        // `free` comes first and is free: only `m` blocks the waiter.
        let group = Group::new(vec![exclusive("free"), exclusive("m")]);
        async move {
            store.wait_for_change(group.request(), wait).await.unwrap();
            tokio::time::Instant::now()
        }
    });
    let mark = mark_key(&store, "m");
    let deadline = tokio::time::Instant::now() + SOON;
    while !exists(&store, &mark).await {
        assert!(tokio::time::Instant::now() < deadline, "the waiter never marked the name");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let left: i64 = raw(&store, &["PTTL", &mark]).await;
    assert!((10_000..=20_000).contains(&left), "the mark outlives the 10 s wait: PTTL {left}");
    assert!(!exists(&store, &mark_key(&store, "free")).await, "only the name that blocks it is marked");
    assert_eq!((intents(&store, "m").await, intents(&store, "free").await), (0, 0), "no place anywhere");
    assert!(!waiter.is_finished(), "nothing changed yet");

    let released_at = tokio::time::Instant::now();
    assert_eq!(holder.release(&*store).await, 1);
    let woken_at = tokio::time::timeout(wait, waiter).await.expect("woken by the release").unwrap();
    let after = woken_at.duration_since(released_at);
    assert!(after < Duration::from_secs(3), "woken {after:?} after the release, not at the end of its 10 s");
    assert!(!exists(&store, &mark).await, "the release took the mark");
    assert_eq!(published.since_last(&store).await, [h_key(&store, "m")], "one message, for the marked name");
    cleanup(&store).await;
}

/// A waiter's mark expires by itself: it lives twice the wait, and once it is gone a
/// release of the name publishes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_waited_for_mark_expires_by_itself() {
    let test = "groups_mark_expiry";
    let Some(url) = distlock_conformance::kit::redis_url(test) else { return };
    let store = RedisLockStore::builder().key_prefix(common::unique_prefix(test)).release_notifications(true);
    let store = store.connect(&url).await.unwrap();
    let mut published = Published::subscribe(&store, &url).await;
    let holder = Group::new(vec![shared("e")]);
    assert!(granted(&holder.try_once(&store, LONG).await));
    let started = tokio::time::Instant::now();
    store.wait_for_change(Group::new(vec![exclusive("e")]).request(), Duration::from_millis(300)).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(290), "blocked: the wait lasts its 300 ms");
    let mark = mark_key(&store, "e");
    let left: i64 = raw(&store, &["PTTL", &mark]).await;
    assert!(left > 0 && left <= 600, "the mark lives twice the wait: PTTL {left}");
    let deadline = tokio::time::Instant::now() + SOON;
    while exists(&store, &mark).await {
        assert!(tokio::time::Instant::now() < deadline, "the mark never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(holder.release(&store).await, 1);
    assert_eq!(published.since_last(&store).await, Vec::<String>::new(), "an expired mark is nobody waiting");
    assert!(keys_left(&store).await.is_empty(), "nothing left: {:?}", keys_left(&store).await);
    cleanup(&store).await;
}

/// Through the manager, with a retry interval far longer than the test: a blocked group,
/// fair (its places on the names) or barging with shared members (no place at all: only
/// its mark), gets the names soon after the holder releases them.
#[tokio::test(flavor = "multi_thread")]
async fn group_waiters_with_a_long_retry_interval_are_woken_by_the_release() {
    use distlock_api::{GroupMember, LockGroup, LockManager, LockOptions};
    let Some(store) = shared_store("groups_long_retry", RedisLockStore::builder().release_notifications(true)).await
    else {
        return;
    };
    let store = Arc::new(store);
    let locks = LockManager::new(Arc::clone(&store) as Arc<distlock_api::DynLockStore>);
    let fair = LockOptions::new().wait(Duration::from_secs(60)).retry_interval(SOON);
    for (waiting, options) in [
        (LockGroup::new([GroupMember::exclusive("r1").unwrap(), GroupMember::exclusive("r2").unwrap()]), fair),
        (LockGroup::new([GroupMember::shared("r1").unwrap(), GroupMember::shared("r2").unwrap()]), fair.barging()),
    ] {
        let waiting = waiting.unwrap();
        let both = LockGroup::new([GroupMember::exclusive("r1").unwrap(), GroupMember::exclusive("r2").unwrap()]);
        let held = locks.try_lock_group(&both.unwrap(), LONG).await.unwrap().expect("free");
        let mark = mark_key(&store, "r1");
        assert!(!exists(&store, &mark).await, "no mark before the waiter waits");
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move { locks.lock_group_opts(&waiting, LONG, &options).await.unwrap().release().await }
        });
        // Waiting: its probe marked the first name, which blocks it.
        let deadline = tokio::time::Instant::now() + SOON;
        while !exists(&store, &mark).await {
            assert!(tokio::time::Instant::now() < deadline, "the waiter never marked the name");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let released_at = tokio::time::Instant::now();
        held.release().await.unwrap();
        tokio::time::timeout(SOON, waiter).await.expect("woken in time").unwrap().unwrap();
        let after = released_at.elapsed();
        assert!(after < Duration::from_secs(3), "{after:?} after the release, with a 10 s retry interval");
    }
    cleanup(&store).await;
}
