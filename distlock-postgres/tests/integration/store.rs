//! The PostgreSQL store's own tests: statements, fencing under races, purge, schema.

use crate::common;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use common::{key, TestTable};
use distlock_api::{Acquire, LockManager, LockStore, QueuedAttempt, Token, Ttl};
use distlock_conformance::kit::{self, postgres_server};
use distlock_postgres::{sqlx, PostgresLockStore, PurgeOptions, MIN_PURGE_HORIZON};

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

async fn acquired_fence(store: &PostgresLockStore, key: &distlock_api::StoreKey, token: &Token, ttl: Ttl) -> u64 {
    match store.try_acquire(key, token, ttl).await.unwrap() {
        Acquire::Acquired { fence: Some(fence) } => fence,
        other => panic!("expected an acquisition with a fence, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_release_extend_inspect_round_trip() {
    let Some(t) = TestTable::new("acquire_release_extend_inspect_round_trip").await else { return };
    let store = &t.store;
    assert_eq!(store.backend(), "postgres");
    assert!(store.capabilities().fencing);
    let k = key("a");
    let (holder, other) = (Token::generate(), Token::generate());

    let fence = acquired_fence(store, &k, &holder, ttl(30_000)).await;
    assert_eq!(store.try_acquire(&k, &other, ttl(30_000)).await.unwrap(), Acquire::Held { ttl_left: None });
    assert!(!store.try_acquire(&k, &holder, ttl(30_000)).await.unwrap().is_acquired(), "not reentrant");

    let info = store.inspect(&k).await.unwrap().expect("held");
    assert_eq!(info.token, holder);
    assert_eq!(info.fence, Some(fence));
    assert!(info.ttl_left <= Duration::from_secs(30) && info.ttl_left > Duration::from_secs(20), "{info:?}");

    assert!(!store.extend(&k, &other, ttl(60_000)).await.unwrap(), "foreign extend");
    assert!(store.extend(&k, &holder, ttl(60_000)).await.unwrap());
    let info = store.inspect(&k).await.unwrap().expect("held");
    assert!(info.ttl_left > Duration::from_secs(50), "extend reset the lease: {info:?}");

    assert!(!store.release(&k, &other).await.unwrap(), "foreign release");
    assert!(store.release(&k, &holder).await.unwrap());
    assert!(!store.release(&k, &holder).await.unwrap(), "second release");
    assert!(!store.extend(&k, &holder, ttl(1_000)).await.unwrap(), "extend after release");
    assert_eq!(store.inspect(&k).await.unwrap(), None);

    // The row stays (the purge removes it later) with the token cleared.
    let sql =
        format!("SELECT token, fence, expires_at <= clock_timestamp() FROM {} WHERE key = $1", store.table_name());
    let (token, kept_fence, ended): (Option<String>, i64, bool) =
        sqlx::query_as(&sql).bind(k.as_str()).fetch_one(store.pool()).await.unwrap();
    assert_eq!((token, kept_fence, ended), (None, i64::try_from(fence).unwrap(), true));

    let next = acquired_fence(store, &k, &other, ttl(1_000)).await;
    assert!(next > fence, "{next} after {fence}");
    t.drop().await;
}

/// Polls `future` at most `polls` times, yielding to the runtime in between (so its I/O
/// progresses); `None` when it was still pending, and then it is dropped (cancelled).
async fn poll_at_most<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    for _ in 0..polls {
        let poll = std::future::poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx))).await;
        if let std::task::Poll::Ready(output) = poll {
            return Some(output);
        }
        tokio::task::yield_now().await;
    }
    None
}

/// Acquisitions cancelled at every point of their flight, each followed at once by a
/// release with the same token (what the manager does): no lease is ever left behind.
/// sqlx sends a cancelled query's buffered statement later, when the connection is next
/// used; the store must not let the release overtake it. The cancellation points are
/// counted in polls, calibrated on this machine, so a fast or a slow server gets the same
/// spread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_after_a_cancelled_acquire_never_leaves_a_lease() {
    let Some(t) = TestTable::new("release_after_a_cancelled_acquire_never_leaves_a_lease").await else { return };
    let k = key("cancelled");
    // How many polls a whole acquisition takes here: the median of a few warm ones.
    let mut samples = Vec::new();
    for _ in 0..8 {
        let token = Token::generate();
        let mut polls = 0;
        let mut attempt = std::pin::pin!(t.store.try_acquire(&k, &token, ttl(60_000)));
        loop {
            polls += 1;
            let poll = std::future::poll_fn(|cx| std::task::Poll::Ready(attempt.as_mut().poll(cx))).await;
            if let std::task::Poll::Ready(result) = poll {
                assert!(result.unwrap().is_acquired());
                break;
            }
            tokio::task::yield_now().await;
        }
        samples.push(polls);
        assert!(t.store.release(&k, &token).await.unwrap());
    }
    samples.remove(0); // the first prepares the statement
    samples.sort_unstable();
    let needed = samples[samples.len() / 2].max(1);
    // From cancelled before the first poll to given twice the polls it needs, and some
    // more: a poll count is a matter of scheduling (the answer may come in while this task
    // yields), so a calibration of 1 poll was once followed by no completion within 2.
    let reach = 2 * needed + 8;
    let (mut cancelled, mut completed) = (0, 0);
    for i in 0..300usize {
        let token = Token::generate();
        let polls = i * reach / 300;
        match poll_at_most(t.store.try_acquire(&k, &token, ttl(60_000)), polls).await {
            Some(result) => {
                assert!(result.unwrap().is_acquired());
                completed += 1;
            }
            None => cancelled += 1,
        }
        t.store.release(&k, &token).await.unwrap();
        assert_eq!(t.store.inspect(&k).await.unwrap(), None, "iteration {i}: a cancelled acquisition left a lease");
    }
    assert!(
        cancelled >= 10 && completed > 0,
        "cancelled {cancelled}, completed {completed} (an acquisition takes {needed} polls)"
    );
    t.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_expire_on_the_server_clock() {
    let Some(t) = TestTable::new("leases_expire_on_the_server_clock").await else { return };
    let store = &t.store;
    let k = key("short");
    let first = Token::generate();
    let fence = acquired_fence(store, &k, &first, ttl(300)).await;
    let started = std::time::Instant::now();
    let second = Token::generate();
    let taken_over = loop {
        match store.try_acquire(&k, &second, ttl(30_000)).await.unwrap() {
            Acquire::Acquired { fence } => break fence.unwrap(),
            Acquire::Held { .. } => {
                assert!(started.elapsed() < Duration::from_secs(10), "a 300 ms lease never expired");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("{other:?}"),
        }
    };
    assert!(started.elapsed() >= Duration::from_millis(250), "taken over after {:?}", started.elapsed());
    assert!(taken_over > fence);
    assert!(!store.release(&k, &first).await.unwrap(), "the expired holder must not release the new one");
    assert!(!store.extend(&k, &first, ttl(1_000)).await.unwrap(), "the expired holder must not extend");
    assert_eq!(store.inspect(&k).await.unwrap().unwrap().token, second);
    t.drop().await;
}

/// Many acquirers race over one key whose leases last 1 ms, so take-overs of expired rows
/// happen concurrently. A trigger logs every fence written, in row-lock order: the fences
/// must strictly increase in that order, and each acquirer must have been told the fence
/// that was written. (A fence drawn before the row lock, applied with
/// `SET fence = EXCLUDED.fence`, fails this.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_strictly_increase_when_acquirers_race_over_expired_rows() {
    let Some(t) = TestTable::new("fences_strictly_increase_when_acquirers_race_over_expired_rows").await else {
        return;
    };
    let log = format!("{}_log", t.store.table_name().trim_end_matches('"'));
    let log = format!("{log}\"");
    let function = log.replace("_log\"", "_logf\"");
    t.admin(&format!(
        "CREATE TABLE {log} (id bigserial PRIMARY KEY, fence bigint NOT NULL); \
         CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF TG_OP = 'INSERT' OR NEW.fence <> OLD.fence THEN INSERT INTO {log} (fence) VALUES (NEW.fence); END IF; \
           RETURN NEW; END $$; \
         CREATE TRIGGER log_fences AFTER INSERT OR UPDATE ON {{table}} FOR EACH ROW EXECUTE FUNCTION {function}();"
    ))
    .await;

    let k = key("raced");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (store, k) = (t.store.clone(), k.clone());
            tokio::spawn(async move {
                let mut fences = Vec::new();
                for _ in 0..60 {
                    if let Acquire::Acquired { fence } =
                        store.try_acquire(&k, &Token::generate(), ttl(1)).await.unwrap()
                    {
                        fences.push(fence.unwrap());
                    }
                }
                fences
            })
        })
        .collect();
    let mut told = BTreeSet::new();
    for task in tasks {
        for fence in task.await.unwrap() {
            assert!(told.insert(fence), "fence {fence} handed out twice");
        }
    }
    let sql = format!("SELECT fence FROM {log} ORDER BY id");
    let written: Vec<i64> = sqlx::query_scalar(&sql).fetch_all(t.store.pool()).await.unwrap();
    assert!(written.len() > 20, "too few take-overs to mean anything: {}", written.len());
    for pair in written.windows(2) {
        assert!(pair[1] > pair[0], "fence {} written after {}", pair[1], pair[0]);
    }
    let written: BTreeSet<u64> = written.into_iter().map(|f| u64::try_from(f).unwrap()).collect();
    assert_eq!(told, written, "acquirers were told exactly the fences that were written");

    t.admin(&format!("DROP TABLE {{table}}; DROP TABLE {log}; DROP FUNCTION {function}()")).await;
}

/// Rounds of 16 acquirers racing over a row whose lease has expired: exactly one wins each
/// round, and the winners' fences strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_many_racers_takes_over_an_expired_lease() {
    let Some(t) = TestTable::new("exactly_one_of_many_racers_takes_over_an_expired_lease").await else { return };
    let k = key("expired");
    let mut last = acquired_fence(&t.store, &k, &Token::generate(), ttl(60_000)).await;
    for round in 0..15 {
        t.age(&k, "1 millisecond").await;
        let racers: Vec<_> = (0..16)
            .map(|_| {
                let (store, k) = (t.store.clone(), k.clone());
                tokio::spawn(async move { store.try_acquire(&k, &Token::generate(), ttl(60_000)).await.unwrap() })
            })
            .collect();
        let mut winners = Vec::new();
        for racer in racers {
            if let Acquire::Acquired { fence } = racer.await.unwrap() {
                winners.push(fence.unwrap());
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        assert!(winners[0] > last, "round {round}: fence {} after {last}", winners[0]);
        last = winners[0];
    }
    t.drop().await;
}

/// A purged key starts again with a fence larger than every fence it had before; the
/// purge never touches held keys or leases that ended within the horizon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_old_rows_and_reacquired_keys_keep_increasing_fences() {
    let Some(t) = TestTable::new("purge_deletes_old_rows_and_reacquired_keys_keep_increasing_fences").await else {
        return;
    };
    let store = &t.store;
    let (old, recent, held, expired) = (key("old"), key("recent"), key("held"), key("expired-old"));
    let mut last = 0;
    for _ in 0..5 {
        let token = Token::generate();
        last = acquired_fence(store, &old, &token, ttl(60_000)).await;
        assert!(store.release(&old, &token).await.unwrap());
    }
    let token = Token::generate();
    acquired_fence(store, &recent, &token, ttl(60_000)).await;
    assert!(store.release(&recent, &token).await.unwrap());
    let holder = Token::generate();
    acquired_fence(store, &held, &holder, ttl(60_000)).await;
    acquired_fence(store, &expired, &Token::generate(), ttl(60_000)).await;
    t.age(&old, "2 hours").await;
    t.age(&expired, "30 minutes").await;
    assert_eq!(t.row_count().await, 4);

    // A horizon below the minimum is raised to it: the just-released row stays.
    assert_eq!(store.purge(Duration::from_secs(3 * 3600)).await.unwrap(), 0, "nothing ended 3 h ago");
    assert_eq!(store.purge(Duration::from_secs(3600)).await.unwrap(), 1, "only the 2 h old row");
    assert_eq!(store.purge(Duration::ZERO).await.unwrap(), 1, "the 30 min old expired row");
    assert_eq!(store.purge(Duration::ZERO).await.unwrap(), 0);
    assert_eq!(t.row_count().await, 2, "the held and the recently released rows remain");
    assert_eq!(store.inspect(&held).await.unwrap().unwrap().token, holder);

    let again = acquired_fence(store, &old, &Token::generate(), ttl(60_000)).await;
    assert!(again > last, "a purged key restarted its fences: {again} after {last}");
    assert!(MIN_PURGE_HORIZON >= Duration::from_secs(60));
    t.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_purger_deletes_old_rows_until_stopped() {
    let Some(t) = TestTable::new("background_purger_deletes_old_rows_until_stopped").await else { return };
    let k = key("old");
    acquired_fence(&t.store, &k, &Token::generate(), ttl(60_000)).await;
    t.age(&k, "2 hours").await;
    let purger = t
        .store
        .spawn_purger(PurgeOptions::new().every(Duration::from_millis(50)).older_than(Duration::from_secs(3600)))
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while t.row_count().await > 0 {
        assert!(std::time::Instant::now() < deadline, "the background purger did not delete the old row");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(format!("{purger:?}").contains("finished: false"));
    purger.stop().await;
    t.drop().await;
}

#[tokio::test]
async fn spawn_purger_needs_a_runtime() {
    let pool = sqlx::postgres::PgPoolOptions::new().connect_lazy("postgres://nobody@127.0.0.1:1/x").unwrap();
    let store = PostgresLockStore::builder().build(pool).unwrap();
    let err = std::thread::spawn(move || store.spawn_purger(PurgeOptions::new()).unwrap_err()).join().unwrap();
    assert!(matches!(err, distlock_api::LockError::Config { .. }), "{err}");
}

/// Eight stores call `ensure_schema` at the same moment on a schema and table that do not
/// exist yet; all succeed (plain `CREATE … IF NOT EXISTS` can fail with a unique
/// violation here), and the result works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_schema_is_safe_when_called_concurrently() {
    let Some(url) = kit::postgres_url("ensure_schema_is_safe_when_called_concurrently") else { return };
    let schema = postgres_server::random_identifier("dl_schema");
    for round in 0..3 {
        let table = format!("t{round}");
        let stores: Vec<_> = futures_join((0..8).map(|_| {
            let (url, builder) = (url.clone(), PostgresLockStore::builder().schema(&schema).table(&table));
            async move { builder.max_connections(1).connect(&url).await }
        }))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
        let calls: Vec<_> =
            stores.iter().cloned().map(|store| tokio::spawn(async move { store.ensure_schema().await })).collect();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        let k = key("works");
        acquired_fence(&stores[0], &k, &Token::generate(), ttl(1_000)).await;
        assert!(!stores[7].try_acquire(&k, &Token::generate(), ttl(1_000)).await.unwrap().is_acquired());
        stores[3].ensure_schema().await.unwrap();
        for store in stores {
            store.pool().close().await;
        }
    }
    postgres_server::execute(&url, &format!("DROP SCHEMA \"{schema}\" CASCADE")).await;
}

async fn futures_join<F: std::future::Future + Send + 'static>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F::Output: Send,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut outputs = Vec::new();
    for handle in handles {
        outputs.push(handle.await.unwrap());
    }
    outputs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_schema_creates_logged_and_unlogged_tables_and_one_logged_sequence() {
    for unlogged in [false, true] {
        let Some(t) = TestTable::with("ensure_schema_creates_logged_and_unlogged_tables", unlogged).await else {
            return;
        };
        let persistence = |name: String| {
            let pool = t.store.pool().clone();
            async move {
                sqlx::query_scalar::<_, String>("SELECT relpersistence::text FROM pg_class WHERE oid = $1::regclass")
                    .bind(name)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(persistence(t.store.table_name()).await, if unlogged { "u" } else { "p" });
        assert_eq!(persistence(t.store.sequence_name()).await, "p", "fences must survive a crash");
        let k = key("x");
        acquired_fence(&t.store, &k, &Token::generate(), ttl(1_000)).await;
        t.drop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_manager_works_over_the_store() {
    let Some(t) = TestTable::new("lock_manager_works_over_the_store").await else { return };
    let locks = LockManager::new(Arc::new(t.store.clone()));
    let name = postgres_server::random_identifier("order");
    let lock = locks.try_lock(&name, Duration::from_secs(10)).await.unwrap();
    let lock = lock.expect("free key");
    assert!(lock.fence().is_some());
    assert!(locks.try_lock(&name, Duration::from_secs(10)).await.unwrap().is_none());
    drop(lock);
    locks.flush_releases().await;
    let again = locks.lock(&name, Duration::from_secs(10)).await.unwrap();
    assert!(again.release().await.unwrap());
    t.drop().await;
}

#[test]
fn futures_and_store_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PostgresLockStore>();
    assert_send_sync::<distlock_postgres::PurgerHandle>();
}

/// A hot key's hand-overs find the next waiter without reading again the places served
/// before it. Each hand-over leaves the place it served dead in the queue's indexes until
/// a vacuum, and a plan that reads every index entry of the key — a bitmap scan, which
/// PostgreSQL picks for a filtered `ORDER BY … LIMIT 1` while the table is small, and
/// then keeps — reads all of them at each hand-over: hand-overs grow slower by the
/// thousand. The test runs in a database of its own, where no other test's transaction
/// keeps the dead places visible (an index scan then reads each about once), with
/// autovacuum off on the queue table, so that they stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_overs_do_not_read_the_places_served_before() {
    const HAND_OVERS: i64 = 300;
    let Some(server) = kit::postgres_url("hand_overs_do_not_read_the_places_served_before") else { return };
    let database = postgres_server::random_identifier("dl_db");
    postgres_server::execute(&server, &format!("CREATE DATABASE {database}")).await;
    let url = format!("{}/{database}", server.rsplit_once('/').expect("a URL with a database").0);
    let application_name = postgres_server::random_identifier("dl_test");
    let builder = PostgresLockStore::builder().schema("dl").table("locks").application_name(&application_name);
    let store = builder.connect(&url).await.expect("connect");
    store.ensure_schema().await.expect("ensure_schema");
    let (key, long) = (key("hot"), ttl(60_000));
    let (a, b) = (Token::generate(), Token::generate());
    // The first release creates the queue table.
    acquired_fence(&store, &key, &a, long).await;
    assert!(store.release(&key, &a).await.unwrap());
    postgres_server::execute(&url, "ALTER TABLE dl.locks_queue SET (autovacuum_enabled = false)").await;

    let queued = store.queue().expect("the PostgreSQL store has a fair queue");
    let attempt = |token| QueuedAttempt { key: &key, token, ttl: long, place: long };
    assert!(matches!(queued.try_acquire_queued(attempt(&a)).await.unwrap(), Acquire::Acquired { .. }));
    for turn in 0..HAND_OVERS {
        let (holder, waiter) = if turn % 2 == 0 { (&a, &b) } else { (&b, &a) };
        assert!(matches!(queued.try_acquire_queued(attempt(waiter)).await.unwrap(), Acquire::Held { .. }));
        assert!(store.release(&key, holder).await.unwrap(), "released (handed over) at turn {turn}");
        let taken = queued.try_acquire_queued(attempt(waiter)).await.unwrap();
        assert!(matches!(taken, Acquire::Acquired { .. }), "the waiter takes its turn {turn}: {taken:?}");
    }
    // Every backend that ran a statement hands in its counts as it exits.
    postgres_server::terminate_backends(&url, &application_name).await;
    let sql = "SELECT coalesce(sum(idx_tup_read), 0)::int8 FROM pg_stat_user_indexes \
               WHERE relid = 'dl.locks_queue'::regclass";
    let mut conn = postgres_server::admin_connection(&url).await;
    let read: i64 = sqlx::query_scalar(sql).fetch_one(&mut conn).await.expect("index reads");
    let _ = sqlx::Connection::close(conn).await;
    postgres_server::execute(&server, &format!("DROP DATABASE {database} WITH (FORCE)")).await;
    // Reading each dead place about once is about ten reads per hand-over (more while
    // other work on the server keeps a place visible a little longer); reading all of
    // them every time is about HAND_OVERS² / 2 (136,000 here).
    assert!(read < 50 * HAND_OVERS, "{read} index entries read for {HAND_OVERS} hand-overs");
}

/// A lease handed to a waiter is its to take even when an older place came back to the
/// head of the line meanwhile (a waiter whose place lapsed and was refreshed keeps its
/// arrival): the key does not stall until the handed lease lapses.
#[tokio::test]
async fn a_handed_lease_is_taken_whoever_heads_the_line() {
    let Some(t) = TestTable::new("a_handed_lease_is_taken_whoever_heads_the_line").await else { return };
    let store = &t.store;
    let (k, long) = (key("handed"), ttl(60_000));
    let (holder, first, second) = (Token::generate(), Token::generate(), Token::generate());
    // The first release creates the queue table.
    acquired_fence(store, &k, &holder, long).await;
    assert!(store.release(&k, &holder).await.unwrap());
    acquired_fence(store, &k, &holder, long).await;
    let queued = store.queue().expect("the PostgreSQL store has a fair queue");
    let attempt = |token| QueuedAttempt { key: &k, token, ttl: long, place: long };
    for waiter in [&first, &second] {
        assert!(matches!(queued.try_acquire_queued(attempt(waiter)).await.unwrap(), Acquire::Held { .. }));
    }
    // `first`'s place lapses, so the release hands the key to `second`.
    let sql = format!(
        "UPDATE {} SET expires_at = clock_timestamp() - interval '1 second' WHERE key = $1 AND token = $2",
        t.derived("queue")
    );
    let aged = sqlx::query(&sql).bind(k.as_str()).bind(first.as_str()).execute(store.pool()).await.expect("age");
    assert_eq!(aged.rows_affected(), 1, "no place of `first`");
    assert!(store.release(&k, &holder).await.unwrap());
    // `first` comes back to the head of the line (its place refreshed, its arrival kept);
    // the key is still `second`'s to take.
    assert!(matches!(queued.try_acquire_queued(attempt(&first)).await.unwrap(), Acquire::Held { .. }));
    let taken = queued.try_acquire_queued(attempt(&second)).await.unwrap();
    assert!(matches!(taken, Acquire::Acquired { fence: Some(_) }), "the handed lease was not taken: {taken:?}");
    // Its release hands the key on to `first`.
    assert!(store.release(&k, &second).await.unwrap());
    let taken = queued.try_acquire_queued(attempt(&first)).await.unwrap();
    assert!(matches!(taken, Acquire::Acquired { fence: Some(_) }), "the next waiter did not take its turn: {taken:?}");
    t.drop().await;
}
