//! Lock groups on PostgreSQL, through the `GroupLockStore` primitives: writer preference,
//! per-holder expiry, all-or-nothing grants, permits, tickets, owners, notifications and
//! a contended semaphore. Each test works in its own schema.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{
    Acquire, GroupAcquire, GroupLockStore, GroupRequest, InvalidGroup, LockError, LockKey, LockMode, LockStore,
    OwnerId, Permits, StoreKey, StoreMember, Token, Ttl,
};
use distlock_conformance::kit::{self, postgres_server};
use distlock_postgres::{sqlx, PostgresLockStore};

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

const LONG: u64 = 30_000;

/// A store in a schema of its own, dropped with everything in it.
struct Fixture {
    store: PostgresLockStore,
    url: String,
    schema: String,
    prefix: String,
}

impl Fixture {
    async fn new(test: &str) -> Option<Self> {
        Self::with(test, |builder| builder).await
    }

    async fn with(
        test: &str,
        configure: impl FnOnce(distlock_postgres::PostgresLockStoreBuilder) -> distlock_postgres::PostgresLockStoreBuilder,
    ) -> Option<Self> {
        let url = kit::postgres_url(test)?;
        let schema = postgres_server::random_identifier("dl_groups");
        let builder = PostgresLockStore::builder().schema(&schema).table("locks").max_connections(8);
        let store = configure(builder).connect(&url).await.expect("connect");
        store.ensure_schema().await.expect("ensure_schema");
        Some(Self { store, url, schema, prefix: postgres_server::random_identifier("g") })
    }

    /// An object of the fixture's schema, qualified and quoted.
    fn object(&self, name: &str) -> String {
        format!("\"{}\".\"{name}\"", self.schema)
    }

    fn groups(&self) -> &dyn GroupLockStore {
        self.store.groups().expect("the PostgreSQL store has groups")
    }

    fn key(&self, name: &str) -> StoreKey {
        LockKey::new(format!("{}:{name}", self.prefix)).unwrap().to_store_key()
    }

    /// A member with the manager's default permits: exclusive 1, shared unlimited.
    fn member(&self, name: &str, mode: LockMode) -> StoreMember {
        StoreMember::new(self.key(name), mode, Permits::DEFAULT.of(mode))
    }

    /// Another store on the fixture's tables with one connection, under an application
    /// name of its own (returned).
    async fn one_connection_store(&self) -> (String, PostgresLockStore) {
        let application_name = postgres_server::random_identifier("dl_one");
        let builder = PostgresLockStore::builder().schema(&self.schema).table("locks");
        let builder = builder.application_name(&application_name).max_connections(1);
        (application_name, builder.connect(&self.url).await.expect("connect"))
    }

    async fn drop(self) {
        self.store.pool().close().await;
        postgres_server::execute(&self.url, &format!("DROP SCHEMA \"{}\" CASCADE", self.schema)).await;
    }
}

/// One group as a manager would drive it: its token, owner and ticket across attempts.
#[derive(Clone)]
struct Group {
    members: Vec<StoreMember>,
    token: Token,
    owner: OwnerId,
    ticket: Option<u64>,
}

impl Group {
    fn new(members: Vec<StoreMember>) -> Self {
        Self::owned(members, OwnerId::new("test", "one").unwrap())
    }

    fn owned(members: Vec<StoreMember>, owner: OwnerId) -> Self {
        Self { members, token: Token::generate(), owner, ticket: None }
    }

    fn keys(&self) -> Vec<StoreKey> {
        self.members.iter().map(|member| member.key.clone()).collect()
    }

    /// One attempt with a lease of `ttl_ms`, leaving intents (and keeping the ticket)
    /// when `waiting`.
    async fn attempt_for(&mut self, store: &dyn GroupLockStore, ttl_ms: u64, waiting: bool) -> GroupAcquire {
        let intent = waiting.then(|| ttl(LONG));
        let request = GroupRequest::new(&self.members, &self.token, &self.owner, ttl(ttl_ms), intent, self.ticket);
        let answer = store.try_acquire_group(request).await.expect("try_acquire_group");
        if let GroupAcquire::Blocked { ticket } = answer {
            if waiting {
                assert!(self.ticket.is_none_or(|given| given == ticket), "the ticket is kept");
                self.ticket = Some(ticket);
            }
        }
        answer
    }

    /// `wait_for_change` for the next waiting attempt (at most a minute), in a task of its
    /// own.
    fn wait_in_background(&self, store: &PostgresLockStore) -> tokio::task::JoinHandle<Result<(), LockError>> {
        let (store, group) = (store.clone(), self.clone());
        tokio::spawn(async move { store.wait_for_change(group.request(), Duration::from_secs(60)).await })
    }

    /// The request of the next waiting attempt (what `wait_for_change` checks).
    fn request(&self) -> GroupRequest<'_> {
        GroupRequest::new(&self.members, &self.token, &self.owner, ttl(LONG), Some(ttl(LONG)), self.ticket)
    }

    async fn attempt(&mut self, store: &dyn GroupLockStore, waiting: bool) -> GroupAcquire {
        self.attempt_for(store, LONG, waiting).await
    }

    async fn take(&mut self, store: &dyn GroupLockStore) -> u64 {
        match self.attempt(store, false).await {
            GroupAcquire::Acquired { fence } => fence.expect("the PostgreSQL store fences"),
            blocked => panic!("expected the group to be granted, got {blocked:?}"),
        }
    }

    async fn release(&self, store: &dyn GroupLockStore) -> usize {
        store.release_group(&self.keys(), &self.token).await.expect("release_group")
    }
}

/// Waits (bounded) until a waiter flagged a row of `token` (it is registered then).
async fn until_flagged(f: &Fixture, token: &Token) {
    let flagged = format!("SELECT count(*) FROM {} WHERE waiting AND token = $1::uuid", f.object("locks_holders"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while sqlx::query_scalar::<_, i64>(&flagged).bind(token.as_str()).fetch_one(f.store.pool()).await.unwrap() == 0 {
        assert!(Instant::now() < deadline, "the waiter never flagged a row of the token");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn granted(answer: &GroupAcquire) -> bool {
    matches!(answer, GroupAcquire::Acquired { fence: Some(_) })
}

/// Waits (bounded) until `key` has `count` live holders: expiry is a matter of the
/// server's clock, so the test asks the server.
async fn until_holders(store: &dyn GroupLockStore, key: &StoreKey, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let holders = store.holders(key).await.unwrap();
        if holders.len() == count {
            return;
        }
        assert!(Instant::now() < deadline, "{key} still has {} holders, waiting for {count}", holders.len());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_are_preferred_over_new_readers() {
    let Some(f) = Fixture::new("writers_are_preferred_over_new_readers").await else { return };
    let store = f.groups();
    let (mut r1, mut r2) =
        (Group::new(vec![f.member("doc", LockMode::Shared)]), Group::new(vec![f.member("doc", LockMode::Shared)]));
    let f1 = r1.take(store).await;
    let f2 = r2.take(store).await;
    assert!(f2 > f1, "fences increase: {f1} {f2}");

    let mut writer = Group::new(vec![f.member("doc", LockMode::Exclusive)]);
    assert!(!granted(&writer.attempt(store, true).await), "readers hold");
    let mut late_reader = Group::new(vec![f.member("doc", LockMode::Shared)]);
    assert!(!granted(&late_reader.attempt(store, false).await), "the waiting writer's intent refuses new readers");
    let holders = store.holders(&f.key("doc")).await.unwrap();
    assert_eq!(holders.len(), 2, "intents are not holders: {holders:?}");
    assert!(holders.iter().all(|h| h.mode == LockMode::Shared && h.owner.as_deref() == Some("test@one")));

    assert_eq!(r1.release(store).await, 1);
    assert!(!granted(&writer.attempt(store, true).await), "one reader still holds");
    assert_eq!(r2.release(store).await, 1);
    let fence = writer.take_waiting(store).await;
    assert!(fence > f2);
    let holders = store.holders(&f.key("doc")).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(
        (holders[0].mode, holders[0].fence, &holders[0].token),
        (LockMode::Exclusive, Some(fence), &writer.token)
    );
    assert!(!granted(&late_reader.attempt(store, false).await), "the writer holds");
    assert_eq!(writer.release(store).await, 1);
    late_reader.take(store).await;
    f.drop().await;
}

/// A reader blocked a moment after a waiting writer stays behind it at every later
/// attempt, also when both came within one millisecond (tickets were milliseconds once, and
/// such a reader's retry, its ticket equal to the writer's, was granted ahead of the
/// writer: the writer then waited for one more read hold). Tickets of first attempts are
/// unique and increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_blocked_after_a_writer_stays_behind_it_within_the_same_millisecond() {
    let Some(f) = Fixture::new("reader_behind_writer_same_ms").await else { return };
    let store = f.groups();
    let mut inside = Group::new(vec![f.member("doc", LockMode::Shared)]);
    inside.take(store).await;
    let mut last_ticket = 0;
    // Back to back, most pairs of attempts fall within one millisecond.
    for round in 0..40 {
        let mut writer = Group::new(vec![f.member("doc", LockMode::Exclusive)]);
        let mut reader = Group::new(vec![f.member("doc", LockMode::Shared)]);
        assert!(!granted(&writer.attempt(store, true).await), "a reader holds");
        assert!(!granted(&reader.attempt(store, true).await), "the writer's place refuses new readers");
        let (w, r) = (writer.ticket.unwrap(), reader.ticket.unwrap());
        assert!(last_ticket < w && w < r, "round {round}: tickets {last_ticket}, {w}, {r} increase");
        last_ticket = r;
        // The reader's retry still yields to the writer's place.
        assert!(!granted(&reader.attempt(store, true).await), "round {round}: the reader overtook the writer");
        store.withdraw_intents(&reader.keys(), &reader.token).await.unwrap();
        store.withdraw_intents(&writer.keys(), &writer.token).await.unwrap();
    }
    assert_eq!(inside.release(store).await, 1);
    f.drop().await;
}

impl Group {
    /// An attempt of a waiting group that must be granted.
    async fn take_waiting(&mut self, store: &dyn GroupLockStore) -> u64 {
        match self.attempt(store, true).await {
            GroupAcquire::Acquired { fence } => fence.unwrap(),
            blocked => panic!("expected the waiting group to be granted, got {blocked:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_holder_expires_on_its_own() {
    let Some(f) = Fixture::new("every_holder_expires_on_its_own").await else { return };
    let store = f.groups();
    let key = f.key("doc");
    let mut short = Group::new(vec![f.member("doc", LockMode::Shared)]);
    let mut long = Group::new(vec![f.member("doc", LockMode::Shared)]);
    assert!(granted(&short.attempt_for(store, 200, false).await));
    long.take(store).await;
    let mut writer = Group::new(vec![f.member("doc", LockMode::Exclusive)]);
    assert!(!granted(&writer.attempt(store, true).await));

    until_holders(store, &key, 1).await;
    assert_eq!(store.holders(&key).await.unwrap()[0].token, long.token, "the long reader keeps its hold");
    assert_eq!(store.extend_group(&short.keys(), &short.token, ttl(LONG)).await.unwrap(), 0, "not revived");
    assert_eq!(short.release(store).await, 0, "an expired hold is not held");
    assert!(!granted(&writer.attempt(store, true).await), "the long reader still holds");
    assert_eq!(long.release(store).await, 1);
    writer.take_waiting(store).await;
    f.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_group_takes_nothing() {
    let Some(f) = Fixture::new("a_blocked_group_takes_nothing").await else { return };
    let store = f.groups();
    let mut holder = Group::new(vec![f.member("b", LockMode::Exclusive)]);
    holder.take(store).await;
    for waiting in [false, true] {
        let mut group = Group::new(vec![
            f.member("a", LockMode::Exclusive),
            f.member("b", LockMode::Exclusive),
            f.member("c", LockMode::Shared),
        ]);
        assert!(!granted(&group.attempt(store, waiting).await));
        for name in ["a", "c"] {
            assert!(store.holders(&f.key(name)).await.unwrap().is_empty(), "{name} was taken (waiting: {waiting})");
        }
        assert_eq!(group.release(store).await, 0, "nothing to release");
    }
    // A free group is taken whole, with one fence.
    let mut free = Group::new(vec![f.member("a", LockMode::Exclusive), f.member("c", LockMode::Shared)]);
    let fence = free.take(store).await;
    for name in ["a", "c"] {
        assert_eq!(store.holders(&f.key(name)).await.unwrap()[0].fence, Some(fence));
    }
    f.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_permits_bound_the_holders() {
    let Some(f) = Fixture::new("shared_permits_bound_the_holders").await else { return };
    let store = f.groups();
    let slot = || Group::new(vec![StoreMember::new(f.key("pool"), LockMode::Shared, Some(2))]);
    let (mut a, mut b, mut c) = (slot(), slot(), slot());
    a.take(store).await;
    b.take(store).await;
    assert!(!granted(&c.attempt(store, false).await), "two permits");
    assert_eq!(a.release(store).await, 1);
    c.take(store).await;
    // Exclusive holders wait for every shared one.
    let mut writer = Group::new(vec![f.member("pool", LockMode::Exclusive)]);
    assert!(!granted(&writer.attempt(store, false).await));
    f.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permits_change_is_seen_by_the_next_grant() {
    let Some(f) = Fixture::new("a_permits_change_is_seen_by_the_next_grant").await else { return };
    let store = f.groups();
    let key = f.key("sem");
    assert_eq!(store.permits(&key, LockMode::Shared).await.unwrap(), None);
    store.set_permits(&key, LockMode::Shared, Some(1)).await.unwrap();
    assert_eq!(store.permits(&key, LockMode::Shared).await.unwrap(), Some(1));
    assert_eq!(store.permits(&key, LockMode::Exclusive).await.unwrap(), None, "per mode");
    // The table wins over the member's default.
    let slot = || Group::new(vec![StoreMember::new(f.key("sem"), LockMode::Shared, Some(5))]);
    let (mut a, mut b, mut c) = (slot(), slot(), slot());
    a.take(store).await;
    assert!(!granted(&b.attempt(store, false).await), "one permit recorded");
    store.set_permits(&key, LockMode::Shared, Some(2)).await.unwrap();
    b.take(store).await;
    assert!(!granted(&c.attempt(store, false).await));
    // Lowered below the holders: they keep their holds, new grants wait.
    store.set_permits(&key, LockMode::Shared, Some(1)).await.unwrap();
    assert_eq!(store.holders(&key).await.unwrap().len(), 2);
    assert_eq!(a.release(store).await, 1);
    assert!(!granted(&c.attempt(store, false).await), "still one holder for one permit");
    // Removed: the member's default (5) applies again.
    store.set_permits(&key, LockMode::Shared, None).await.unwrap();
    assert_eq!(store.permits(&key, LockMode::Shared).await.unwrap(), None);
    c.take(store).await;
    let err = store.set_permits(&key, LockMode::Shared, Some(0)).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidGroup { reason: InvalidGroup::ZeroPermits { .. } }), "{err}");
    f.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_extend_and_release_owner_are_token_and_owner_checked() {
    let Some(f) = Fixture::new("release_extend_and_release_owner").await else { return };
    let store = f.groups();
    let (mine, theirs) = (OwnerId::new("app", "replica-1").unwrap(), OwnerId::new("app", "replica-2").unwrap());
    let mut g1 = Group::owned(vec![f.member("a", LockMode::Shared), f.member("b", LockMode::Exclusive)], mine.clone());
    let mut g2 = Group::owned(vec![f.member("c", LockMode::Exclusive)], mine.clone());
    let mut other =
        Group::owned(vec![f.member("a", LockMode::Shared), f.member("d", LockMode::Exclusive)], theirs.clone());
    g1.take(store).await;
    g2.take(store).await;
    other.take(store).await;

    assert_eq!(store.extend_group(&g1.keys(), &Token::generate(), ttl(LONG)).await.unwrap(), 0, "a foreign token");
    assert_eq!(store.extend_group(&g1.keys(), &g1.token, ttl(LONG)).await.unwrap(), 2);
    assert_eq!(store.release_group(&g1.keys(), &Token::generate()).await.unwrap(), 0);
    assert_eq!(g1.release(store).await, 2);
    assert_eq!(g1.release(store).await, 0, "released twice");
    assert_eq!(store.extend_group(&g1.keys(), &g1.token, ttl(LONG)).await.unwrap(), 0, "released");

    g1.token = Token::generate();
    g1.take(store).await;
    assert_eq!(store.release_owner(&mine).await.unwrap(), 3, "g1's two holds and g2's one");
    for name in ["b", "c"] {
        assert!(store.holders(&f.key(name)).await.unwrap().is_empty(), "{name}");
    }
    let a = store.holders(&f.key("a")).await.unwrap();
    assert_eq!((a.len(), a[0].owner.as_deref()), (1, Some("app@replica-2")), "the other owner keeps its holds");
    assert_eq!(store.release_owner(&mine).await.unwrap(), 0);
    assert_eq!(other.release(store).await, 2);
    f.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_an_expired_hold_returns_zero() {
    let Some(f) = Fixture::new("extending_an_expired_hold_returns_zero").await else { return };
    let store = f.groups();
    let mut group = Group::new(vec![f.member("x", LockMode::Exclusive), f.member("y", LockMode::Shared)]);
    assert!(granted(&group.attempt_for(store, 100, false).await));
    assert_eq!(store.extend_group(&group.keys(), &group.token, ttl(100)).await.unwrap(), 2);
    until_holders(store, &f.key("x"), 0).await;
    until_holders(store, &f.key("y"), 0).await;
    assert_eq!(store.extend_group(&group.keys(), &group.token, ttl(LONG)).await.unwrap(), 0);
    assert_eq!(group.release(store).await, 0);
    // Someone else takes the expired names at once.
    Group::new(vec![f.member("x", LockMode::Exclusive)]).take(store).await;
    f.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_64_is_one_grant_and_65_is_refused() {
    let Some(f) = Fixture::new("a_group_of_64_is_one_grant").await else { return };
    let store = f.groups();
    assert_eq!(store.max_group(), 64);
    let members: Vec<StoreMember> = (0..64)
        .map(|i| f.member(&format!("m{i}"), if i % 2 == 0 { LockMode::Shared } else { LockMode::Exclusive }))
        .collect();
    let mut group = Group::new(members.clone());
    let fence = group.take(store).await;
    for member in &members {
        let holders = store.holders(&member.key).await.unwrap();
        assert_eq!((holders.len(), holders[0].fence, holders[0].mode), (1, Some(fence), member.mode));
    }
    // One exclusive member held: another group of all 64 is refused whole.
    let mut rival =
        Group::new(members.iter().map(|m| StoreMember::new(m.key.clone(), LockMode::Shared, None)).collect());
    assert!(!granted(&rival.attempt(store, false).await));
    assert_eq!(store.extend_group(&group.keys(), &group.token, ttl(LONG)).await.unwrap(), 64);
    assert_eq!(group.release(store).await, 64);
    rival.take(store).await;

    let mut too_many = members.clone();
    too_many.push(f.member("m64", LockMode::Shared));
    let (token, owner) = (Token::generate(), OwnerId::new("test", "one").unwrap());
    let err = store.try_acquire_group(GroupRequest::new(&too_many, &token, &owner, ttl(LONG), None, None)).await;
    assert!(
        matches!(err, Err(LockError::InvalidGroup { reason: InvalidGroup::TooLarge { len: 65, max: 64 } })),
        "{err:?}"
    );
    let twice = [f.member("a", LockMode::Shared), f.member("a", LockMode::Exclusive)];
    let err = store.try_acquire_group(GroupRequest::new(&twice, &token, &owner, ttl(LONG), None, None)).await;
    assert!(matches!(err, Err(LockError::InvalidGroup { reason: InvalidGroup::DuplicateName { .. } })), "{err:?}");
    f.drop().await;
}

/// G1 = {a: W, b: R} and G2 = {b: W, a: R} wait at the same time, each leaving an intent
/// on the name the other reads. Tickets order them: the older group's reads are not
/// blocked by the younger one's intent, so both finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_waiting_groups_that_read_each_others_names_both_finish() {
    let Some(f) = Fixture::new("two_waiting_groups_both_finish").await else { return };
    let store = f.groups();
    let mut readers = Group::new(vec![f.member("a", LockMode::Shared), f.member("b", LockMode::Shared)]);
    readers.take(store).await;
    let mut g1 = Group::new(vec![f.member("a", LockMode::Exclusive), f.member("b", LockMode::Shared)]);
    let mut g2 = Group::new(vec![f.member("b", LockMode::Exclusive), f.member("a", LockMode::Shared)]);
    assert!(!granted(&g1.attempt(store, true).await));
    // A younger ticket for g2, whatever the clock's resolution.
    g2.ticket = Some(g1.ticket.unwrap() + 1);
    assert!(!granted(&g2.attempt(store, true).await));
    assert_eq!(readers.release(store).await, 2);

    let mut finished = [false, false];
    for _ in 0..10 {
        for (i, group) in [&mut g1, &mut g2].into_iter().enumerate() {
            if !finished[i] && granted(&group.attempt(store, true).await) {
                finished[i] = true;
                assert_eq!(group.release(store).await, 2);
            }
        }
        if finished == [true, true] {
            break;
        }
    }
    assert_eq!(finished, [true, true], "both groups finish");
    f.drop().await;
}

/// The same call run twice (as after a lost connection whose first run committed) is
/// recognised: the same fence, nothing drawn twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_run_again_with_its_token_is_recognised() {
    let Some(f) = Fixture::new("a_grant_run_again_is_recognised").await else { return };
    let store = f.groups();
    let mut group = Group::new(vec![f.member("a", LockMode::Exclusive), f.member("b", LockMode::Shared)]);
    let fence = group.take(store).await;
    // The store's retry after a lost connection sends the same call with `$9` true.
    let call =
        include_str!("../../src/sql/group/acquire.sql").replace("{acquire_group}", &f.object("locks_acquire_group"));
    let again: (Option<i64>, Option<i64>) = sqlx::query_as(&call)
        .bind([f.key("a").as_str(), f.key("b").as_str()])
        .bind(["W", "R"])
        .bind([Some(1), None::<i32>])
        .bind(group.token.as_str())
        .bind("test@one")
        .bind(30_000_i64)
        .bind(None::<i64>)
        .bind(None::<i64>)
        .bind(true)
        .bind(true)
        .fetch_one(f.store.pool())
        .await
        .unwrap();
    assert_eq!(again, (Some(i64::try_from(fence).unwrap()), None), "the same fence, nothing drawn twice");
    // A manager never repeats a granted token, but if one did, the holds are renewed.
    let renewed = group.take(store).await;
    assert!(renewed > fence);
    for name in ["a", "b"] {
        let holders = store.holders(&f.key(name)).await.unwrap();
        assert_eq!((holders.len(), holders[0].fence), (1, Some(renewed)), "{name}");
    }
    assert_eq!(group.release(store).await, 2);
    // Group fences and single-lock fences come from one sequence.
    let (single, token) = (f.key("single"), Token::generate());
    let distlock_api::Acquire::Acquired { fence: Some(single_fence) } =
        f.store.try_acquire(&single, &token, ttl(LONG)).await.unwrap()
    else {
        panic!("single lock not acquired")
    };
    assert!(single_fence > fence);
    let mut next = Group::new(vec![StoreMember::new(single, LockMode::Exclusive, Some(1))]);
    assert!(next.take(store).await > single_fence, "group names live apart from single-lock keys");
    f.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiting_group() {
    let Some(f) = Fixture::new("a_release_wakes_a_waiting_group").await else { return };
    let store = f.groups();
    let mut holder = Group::new(vec![f.member("a", LockMode::Exclusive)]);
    holder.take(store).await;
    let mut waiter = Group::new(vec![f.member("a", LockMode::Shared), f.member("z", LockMode::Exclusive)]);
    assert!(!granted(&waiter.attempt(store, true).await));
    let started = Instant::now();
    let waiting = waiter.wait_in_background(&f.store);
    // The waiter flags the holder's row once it is registered; then the release notifies.
    until_flagged(&f, &holder.token).await;
    assert!(!waiting.is_finished());
    assert_eq!(holder.release(store).await, 1);
    tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("woken by the release").unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    waiter.take_waiting(store).await;
    // A free name ends a wait at once.
    let free = Group::new(vec![f.member("free", LockMode::Exclusive)]);
    tokio::time::timeout(Duration::from_secs(10), store.wait_for_change(free.request(), Duration::from_secs(60)))
        .await
        .expect("a free name is not waited for")
        .unwrap();
    f.drop().await;
}

/// A writer that three readers block sleeps through the releases of the first two and is
/// woken by the last: it looks again once, not after each release (each look is a retry
/// and a check that compete with the readers' own statements).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_blocked_by_several_holders_is_woken_by_the_last_release() {
    let Some(f) = Fixture::new("woken_by_the_last_release").await else { return };
    let store = f.groups();
    let mut readers: Vec<Group> = (0..3).map(|_| Group::new(vec![f.member("a", LockMode::Shared)])).collect();
    for reader in &mut readers {
        reader.take(store).await;
    }
    let mut writer = Group::new(vec![f.member("a", LockMode::Exclusive)]);
    assert!(!granted(&writer.attempt(store, true).await));
    let waiting = writer.wait_in_background(&f.store);
    for reader in &readers {
        until_flagged(&f, &reader.token).await;
    }
    // A probe waiting on another name, woken after the two releases: the listener, which
    // delivers notifications in order, has handed both to the writer's wait by then.
    let mut other = Group::new(vec![f.member("b", LockMode::Exclusive)]);
    other.take(store).await;
    let mut probe = Group::new(vec![f.member("b", LockMode::Exclusive)]);
    assert!(!granted(&probe.attempt(store, true).await));
    let probing = probe.wait_in_background(&f.store);
    until_flagged(&f, &other.token).await;
    for reader in &readers[..2] {
        assert_eq!(reader.release(store).await, 1);
    }
    assert_eq!(other.release(store).await, 1);
    tokio::time::timeout(Duration::from_secs(10), probing).await.expect("the probe is woken").unwrap().unwrap();
    // Room for a woken writer's task to finish, had it been woken.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "two of the three readers released: the writer sleeps on");
    assert_eq!(readers[2].release(store).await, 1);
    tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("woken by the last release").unwrap().unwrap();
    writer.take_waiting(store).await;
    probe.take_waiting(store).await;
    f.drop().await;
}

/// A waiter of a semaphore that its holders fill is woken by the first release, which
/// frees a permit: it does not wait for every holder to go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_is_woken_by_the_release_that_frees_a_permit() {
    let Some(f) = Fixture::new("semaphore_waiter_woken_by_one_release").await else { return };
    let store = f.groups();
    let slot = || StoreMember::new(f.key("pool"), LockMode::Shared, Some(2));
    let mut holders = [Group::new(vec![slot()]), Group::new(vec![slot()])];
    for holder in &mut holders {
        holder.take(store).await;
    }
    let mut waiter = Group::new(vec![slot()]);
    assert!(!granted(&waiter.attempt(store, true).await), "both permits are taken");
    let waiting = waiter.wait_in_background(&f.store);
    for holder in &holders {
        until_flagged(&f, &holder.token).await;
    }
    assert_eq!(holders[0].release(store).await, 1);
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("woken by the release that freed a permit")
        .unwrap()
        .unwrap();
    waiter.take_waiting(store).await;
    assert_eq!(holders[1].release(store).await, 1);
    assert_eq!(waiter.release(store).await, 1);
    f.drop().await;
}

/// Releases free a slot (`token = NULL`) and the next grant of the name takes it again:
/// a name keeps as many rows as it had holders at once, however many grants it saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_are_reused_so_a_name_keeps_as_many_rows_as_it_had_holders() {
    let Some(f) = Fixture::new("slots_are_reused").await else { return };
    let store = f.groups();
    for _ in 0..20 {
        let mut readers: Vec<Group> = (0..3).map(|_| Group::new(vec![f.member("hot", LockMode::Shared)])).collect();
        for reader in &mut readers {
            reader.take(store).await;
        }
        for reader in &readers {
            assert_eq!(reader.release(store).await, 1);
        }
        let mut writer = Group::new(vec![f.member("hot", LockMode::Exclusive), f.member("cold", LockMode::Shared)]);
        writer.take(store).await;
        assert_eq!(writer.release(store).await, 2);
    }
    let rows = format!(
        "SELECT count(*), count(*) FILTER (WHERE token IS NULL) FROM {} WHERE name = $1",
        f.object("locks_holders")
    );
    for (name, peak) in [("hot", 3), ("cold", 1)] {
        let (all, free): (i64, i64) =
            sqlx::query_as(&rows).bind(f.key(name).as_str()).fetch_one(f.store.pool()).await.unwrap();
        assert_eq!((all, free), (peak, peak), "{name}");
    }
    f.drop().await;
}

/// A wait checks the request itself after registering: it returns at once when the
/// request could be granted now — its own intent and holders that do not conflict with it
/// do not hold it back — so a release between the blocked attempt and the wait is not
/// slept through; an older writer's intent does hold a reader back until it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_returns_at_once_when_the_request_could_be_granted() {
    let Some(f) = Fixture::new("a_wait_returns_at_once_when_grantable").await else { return };
    let store = f.groups();
    async fn at_once(store: &dyn GroupLockStore, request: GroupRequest<'_>) {
        tokio::time::timeout(Duration::from_secs(10), store.wait_for_change(request, Duration::from_secs(60)))
            .await
            .expect("the request could be granted: the wait returns at once")
            .unwrap();
    }
    // A writer whose only obstacle left after the release is its own intent.
    let mut reader = Group::new(vec![f.member("a", LockMode::Shared)]);
    reader.take(store).await;
    let mut writer = Group::new(vec![f.member("a", LockMode::Exclusive)]);
    assert!(!granted(&writer.attempt(store, true).await));
    assert_eq!(reader.release(store).await, 1);
    at_once(store, writer.request()).await;
    writer.take_waiting(store).await;

    // A reader blocked by a writer that released meanwhile, while another reader came in.
    let mut holder = Group::new(vec![f.member("b", LockMode::Exclusive)]);
    holder.take(store).await;
    let mut waiting_reader = Group::new(vec![f.member("b", LockMode::Shared)]);
    assert!(!granted(&waiting_reader.attempt(store, true).await));
    assert_eq!(holder.release(store).await, 1);
    Group::new(vec![f.member("b", LockMode::Shared)]).take(store).await;
    at_once(store, waiting_reader.request()).await;
    waiting_reader.take_waiting(store).await;

    // A reader behind an older writer's intent waits until the intent is withdrawn.
    let mut blocker = Group::new(vec![f.member("c", LockMode::Shared)]);
    blocker.take(store).await;
    let mut older = Group::new(vec![f.member("c", LockMode::Exclusive)]);
    assert!(!granted(&older.attempt(store, true).await));
    // A later millisecond on the server's clock: a reader whose ticket equals the intent's
    // yields on its first attempt only.
    let now_ms = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
    let older_ticket = i64::try_from(older.ticket.expect("a ticket")).unwrap();
    while sqlx::query_scalar::<_, i64>(now_ms).fetch_one(f.store.pool()).await.unwrap() <= older_ticket {
        tokio::task::yield_now().await;
    }
    let mut newer = Group::new(vec![f.member("c", LockMode::Shared)]);
    assert!(!granted(&newer.attempt(store, true).await), "held back by the older intent");
    let waiting = newer.wait_in_background(&f.store);
    // The wait flags the intent (the one row that blocks it), then sleeps.
    until_flagged(&f, &older.token).await;
    assert!(!waiting.is_finished(), "an older intent holds the reader back");
    store.withdraw_intents(&older.keys(), &older.token).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("woken by the withdrawal").unwrap().unwrap();
    newer.take_waiting(store).await;
    assert_eq!(blocker.release(store).await, 1);
    f.drop().await;
}

/// 16 tasks share a semaphore of 3 (waiting with tickets and `wait_for_change`): never
/// more than 3 inside at once, and every task gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_contended_semaphore_never_admits_more_than_its_permits() {
    let Some(f) = Fixture::new("a_contended_semaphore").await else { return };
    let f = Arc::new(f);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (f, inside, most) = (Arc::clone(&f), Arc::clone(&inside), Arc::clone(&most));
            tokio::spawn(async move {
                let store = f.groups();
                for _ in 0..5 {
                    let mut group = Group::new(vec![StoreMember::new(f.key("sem"), LockMode::Shared, Some(3))]);
                    while !granted(&group.attempt(store, true).await) {
                        store.wait_for_change(group.request(), Duration::from_millis(100)).await.unwrap();
                    }
                    // A read and a later write: a second holder inside would be counted.
                    let now = inside.load(Ordering::SeqCst) + 1;
                    inside.store(now, Ordering::SeqCst);
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert_eq!(group.release(store).await, 1);
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task).await.expect("no task starves").unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "at most 3 inside, saw {most}");
    Arc::try_unwrap(f).ok().expect("tasks are done").drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_schema_creates_the_group_objects_once_and_unlogged_when_asked() {
    let Some(f) = Fixture::with("ensure_schema_creates_the_group_objects", |b| b.unlogged(true)).await else { return };
    let persistence: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.relname::text, c.relpersistence::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1",
    )
    .bind(&f.schema)
    .fetch_all(f.store.pool())
    .await
    .unwrap();
    let expected = [("locks", "u"), ("locks_holders", "u"), ("locks_permits", "p")];
    assert_eq!(persistence, expected.map(|(a, b)| (a.to_owned(), b.to_owned())), "permits are configuration: logged");
    assert_eq!(
        f.store.statements().ddl().len(),
        8,
        "schema, sequence, lease table, holders, its placed_at, index, permits, function"
    );
    f.drop().await;

    // Many processes creating a fresh layout at the same moment.
    let Some(url) = kit::postgres_url("ensure_schema_creates_the_group_objects") else { return };
    let schema = postgres_server::random_identifier("dl_groups");
    let mut stores = Vec::new();
    for _ in 0..4 {
        let store = PostgresLockStore::builder().schema(&schema).table("locks").max_connections(1).connect(&url).await;
        stores.push(store.expect("connect"));
    }
    let tasks: Vec<_> =
        stores.iter().cloned().map(|store| tokio::spawn(async move { store.ensure_schema().await })).collect();
    for task in tasks {
        task.await.unwrap().expect("concurrent ensure_schema");
    }
    let store = &stores[0];
    let (token, owner) = (Token::generate(), OwnerId::new("test", "one").unwrap());
    let members = [StoreMember::new(LockKey::new("k").unwrap().to_store_key(), LockMode::Exclusive, Some(1))];
    let request = GroupRequest::new(&members, &token, &owner, ttl(LONG), None, None);
    assert!(granted(&store.try_acquire_group(request).await.unwrap()));
    for store in stores {
        store.pool().close().await;
    }
    postgres_server::execute(&url, &format!("DROP SCHEMA \"{schema}\" CASCADE")).await;
}

/// Readers and writers of one hot name (and a second name some groups add): a writer
/// inside means nobody else is, readers are inside together, and nobody starves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_and_writers_exclude_each_other_under_contention() {
    let Some(f) = Fixture::new("readers_and_writers_exclude_each_other").await else { return };
    let f = Arc::new(f);
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let (f, readers, writers, most_readers) =
                (Arc::clone(&f), Arc::clone(&readers), Arc::clone(&writers), Arc::clone(&most_readers));
            tokio::spawn(async move {
                let store = f.groups();
                let writer = i % 4 == 0;
                for round in 0..6 {
                    let mode = if writer { LockMode::Exclusive } else { LockMode::Shared };
                    let mut members = vec![f.member("hot", mode)];
                    if round % 2 == 1 {
                        members.push(f.member(&format!("side{}", i % 3), LockMode::Exclusive));
                    }
                    let mut group = Group::new(members);
                    while !granted(&group.attempt(store, true).await) {
                        store.wait_for_change(group.request(), Duration::from_millis(100)).await.unwrap();
                    }
                    if writer {
                        let inside = writers.fetch_add(1, Ordering::SeqCst) + 1;
                        assert_eq!((inside, readers.load(Ordering::SeqCst)), (1, 0), "a writer is alone");
                    } else {
                        let inside = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        most_readers.fetch_max(inside, Ordering::SeqCst);
                        assert_eq!(writers.load(Ordering::SeqCst), 0, "no reader beside a writer");
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    if writer {
                        writers.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        readers.fetch_sub(1, Ordering::SeqCst);
                    }
                    assert_eq!(group.release(store).await, group.members.len());
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task).await.expect("nobody starves").unwrap();
    }
    assert!(most_readers.load(Ordering::SeqCst) >= 1);
    assert!(f.groups().holders(&f.key("hot")).await.unwrap().is_empty(), "all released");
    Arc::try_unwrap(f).ok().expect("tasks are done").drop().await;
}

/// After `pg_terminate_backend` of every pooled connection, each group operation runs
/// again on a new connection instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_operations_survive_dead_pooled_connections() {
    let app = postgres_server::random_identifier("dl_groups_dead");
    let Some(f) = Fixture::with("group_operations_survive_dead_pooled_connections", |b| b.application_name(&app)).await
    else {
        return;
    };
    let store = f.groups();
    let mut group = Group::new(vec![f.member("a", LockMode::Exclusive), f.member("b", LockMode::Shared)]);
    // Fill the pool with live connections, then kill them all.
    let warm: Vec<_> = (0..4).map(|_| f.store.pool().acquire()).collect();
    let mut held = Vec::new();
    for conn in warm {
        held.push(conn.await.unwrap());
    }
    drop(held);
    assert!(postgres_server::terminate_backends(&f.url, &app).await > 0);
    group.take(store).await;
    assert!(postgres_server::terminate_backends(&f.url, &app).await > 0);
    assert_eq!(store.extend_group(&group.keys(), &group.token, ttl(LONG)).await.unwrap(), 2);
    assert!(postgres_server::terminate_backends(&f.url, &app).await > 0);
    assert_eq!(store.holders(&f.key("a")).await.unwrap().len(), 1);
    assert!(postgres_server::terminate_backends(&f.url, &app).await > 0);
    assert_eq!(group.release(store).await, 2);
    f.drop().await;
}

/// How many sequential scans each table of `schema` has had, by name. Read once the
/// backends that scanned have exited (see `terminate_backends`): a backend hands in its
/// counts before it leaves `pg_stat_activity`.
async fn sequential_scans(url: &str, schema: &str) -> Vec<(String, i64)> {
    let mut conn = postgres_server::admin_connection(url).await;
    let sql = "SELECT relname::text, seq_scan FROM pg_stat_user_tables WHERE schemaname = $1 ORDER BY relname";
    let scans = sqlx::query_as(sql).bind(schema).fetch_all(&mut conn).await.expect("read the scan counts");
    let _ = sqlx::Connection::close(conn).await;
    scans
}

/// Lock operations find a key's rows through the tables' indexes. A plan that scans the
/// whole table is the cheapest while a table is small, and a connection keeps the plan it
/// settled on: once a burst of waiting had filled the queue table with dead rows, or many
/// names the holders table, every release or group grant would read all of its pages.
/// The tables here are new and empty, the case that tempts the planner most, and each
/// operation runs more often than PostgreSQL's five planned runs before it settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_operations_read_their_tables_by_index() {
    let fixture_name = postgres_server::random_identifier("dl_fixture");
    let test = "lock_operations_read_their_tables_by_index";
    let Some(f) = Fixture::with(test, |builder| builder.application_name(&fixture_name)).await else { return };
    let (application_name, store) = f.one_connection_store().await;
    // The first operations create the queue table and the groups' objects.
    let (warm, token) = (f.key("warm"), Token::generate());
    assert!(matches!(store.try_acquire(&warm, &token, ttl(LONG)).await.unwrap(), Acquire::Acquired { .. }));
    assert!(store.release(&warm, &token).await.unwrap());
    let mut group = Group::new(vec![f.member("warm-group", LockMode::Exclusive)]);
    group.take(&store).await;
    assert_eq!(group.release(&store).await, 1);
    // Every backend that ran a statement so far has handed in its counts once it is gone.
    for name in [&fixture_name, &application_name] {
        postgres_server::terminate_backends(&f.url, name).await;
    }
    let before = sequential_scans(&f.url, &f.schema).await;

    let (application_name, store) = f.one_connection_store().await;
    for round in 0..8 {
        let (key, token) = (f.key(&format!("single{round}")), Token::generate());
        assert!(matches!(store.try_acquire(&key, &token, ttl(LONG)).await.unwrap(), Acquire::Acquired { .. }));
        assert!(store.release(&key, &token).await.unwrap());
        for (names, mode) in [(1, LockMode::Shared), (2, LockMode::Exclusive), (3, LockMode::Exclusive)] {
            let members = (0..names).map(|n| f.member(&format!("group{round}.{n}"), mode)).collect();
            let mut group = Group::new(members);
            group.take(&store).await;
            assert_eq!(group.release(&store).await, names);
        }
    }
    postgres_server::terminate_backends(&f.url, &application_name).await;
    let after = sequential_scans(&f.url, &f.schema).await;
    assert_eq!(after, before, "tables scanned in full (name, scans before → after)");
    f.drop().await;
}
