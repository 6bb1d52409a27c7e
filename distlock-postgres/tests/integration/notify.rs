//! Release notifications: `pg_notify` on release, one `LISTEN` connection per store,
//! no missed wake-ups, and falling back to polling while the listener is lost.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{key, TestTable};
use distlock_api::{Acquire, DynLockStore, LockError, LockManager, LockOptions, LockStore, QueuedAttempt, Token, Ttl};
use distlock_conformance::counting::CountingStore;
use distlock_conformance::kit::postgres_server;
use distlock_postgres::sqlx;
use distlock_postgres::sqlx::postgres::PgListener;

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

/// Waits (bounded) until `condition` holds for the listener backends of `app`.
async fn until_listeners(url: &str, app: &str, what: &str, condition: impl Fn(&[i32]) -> bool) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pids = postgres_server::listener_backends(url, app).await;
        if condition(&pids) {
            return pids;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}; listener backends: {pids:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A release of a lease a waiter flagged notifies the key on the table's channel exactly
/// when it released something: not for a foreign token, not for a second release. Markers
/// sent in between by another session fix the order (notifications arrive in commit
/// order), so nothing is timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_notifies_its_key_only_when_it_released() {
    let Some(t) = TestTable::new("release_notifies_its_key_only_when_it_released").await else { return };
    let channel = t.store.statements().channel().to_owned();
    assert!(channel.starts_with("distlock:distlock_test.t_"), "{channel}");
    let mut listener = PgListener::connect(&t.url).await.unwrap();
    listener.listen(&channel).await.unwrap();
    let marker = |n: u32| {
        let (pool, channel) = (t.store.pool().clone(), channel.clone());
        async move {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(channel)
                .bind(format!("marker {n}"))
                .execute(&pool)
                .await
                .unwrap();
        }
    };
    let (k, holder) = (key("notified"), Token::generate());
    assert!(t.store.try_acquire(&k, &holder, ttl(30_000)).await.unwrap().is_acquired());
    // A waiter (gone after 200 ms) flags the lease as waited for.
    t.store.wait_for_release(&k, Duration::from_millis(200)).await.unwrap();
    assert!(!t.store.release(&k, &Token::generate()).await.unwrap(), "foreign release");
    marker(1).await;
    assert!(t.store.release(&k, &holder).await.unwrap());
    assert!(!t.store.release(&k, &holder).await.unwrap(), "second release");
    marker(2).await;

    let mut received = Vec::new();
    while received.last().map(String::as_str) != Some("marker 2") {
        let notification =
            tokio::time::timeout(Duration::from_secs(10), listener.recv()).await.expect("notification").unwrap();
        assert_eq!(notification.channel(), channel);
        received.push(notification.payload().to_owned());
    }
    assert_eq!(received, ["marker 1", k.as_str(), "marker 2"]);
    t.drop().await;
}

/// `wait_for_release` returns at once when the key is already free (a release between the
/// caller's failed attempt and its registration is not slept through), when the lease runs
/// out (expiry is not notified), and otherwise after `max` — not earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_release_returns_for_a_free_key_at_expiry_or_after_max() {
    let Some(t) = TestTable::new("wait_for_release_returns_for_a_free_key_at_expiry_or_after_max").await else {
        return;
    };
    let store = &t.store;
    assert!(store.capabilities().release_notifications);
    let (k, holder) = (key("w"), Token::generate());

    // Never locked, then released: both free.
    for _ in 0..2 {
        let started = Instant::now();
        store.wait_for_release(&k, Duration::from_secs(20)).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(5), "free key: waited {:?}", started.elapsed());
        if store.try_acquire(&k, &holder, ttl(30_000)).await.unwrap().is_acquired() {
            assert!(store.release(&k, &holder).await.unwrap());
        }
    }

    // Held and not released: waits `max`.
    assert!(store.try_acquire(&k, &holder, ttl(30_000)).await.unwrap().is_acquired());
    let started = Instant::now();
    store.wait_for_release(&k, Duration::from_millis(700)).await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(690) && waited < Duration::from_secs(5), "held key: waited {waited:?}");
    assert!(store.release(&k, &holder).await.unwrap());

    // An expiring lease: back when it ran out, long before `max`.
    assert!(store.try_acquire(&k, &holder, ttl(1_500)).await.unwrap().is_acquired());
    let left = store.inspect(&k).await.unwrap().expect("held").ttl_left;
    let started = Instant::now();
    // A wake-up may be spurious — say the late notification of the release above, under
    // load — and the caller then tries again, as the manager does.
    for _ in 0..3 {
        store.wait_for_release(&k, Duration::from_secs(20)).await.unwrap();
        if store.inspect(&k).await.unwrap().is_none() {
            break;
        }
    }
    let waited = started.elapsed();
    assert!(waited + Duration::from_millis(100) >= left, "woke {waited:?} into a lease with {left:?} left");
    assert!(waited < left + Duration::from_secs(3), "expired lease: waited {waited:?} ({left:?} left)");
    assert!(store.try_acquire(&k, &Token::generate(), ttl(1_000)).await.unwrap().is_acquired());
    t.drop().await;
}

/// 24 waiters on 6 keys (retry interval 20 s) are served by one `LISTEN` connection
/// besides the pool, and every one of them gets its lock soon after the releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_listener_connection_serves_every_waiter() {
    let Some(t) = TestTable::new("one_listener_connection_serves_every_waiter").await else { return };
    let counting = CountingStore::new(Arc::new(t.store.clone()) as Arc<DynLockStore>);
    let locks = LockManager::new(counting.clone());
    let prefix = postgres_server::random_identifier("many");
    let names: Vec<String> = (0..6).map(|i| format!("{prefix}:{i}")).collect();
    let mut held = Vec::new();
    for name in &names {
        held.push(locks.try_lock(name, Duration::from_secs(60)).await.unwrap().unwrap());
    }
    let retry = Duration::from_secs(20);
    let waiters: Vec<_> = (0..24)
        .map(|i| {
            let (locks, name) = (locks.clone(), names[i % names.len()].clone());
            tokio::spawn(async move {
                let lock = locks
                    .lock_opts(
                        &name,
                        Duration::from_secs(60),
                        &LockOptions::new().wait(Duration::from_secs(60)).retry_interval(retry),
                    )
                    .await?;
                let acquired_at = Instant::now();
                lock.release().await?;
                Ok::<_, LockError>(acquired_at)
            })
        })
        .collect();
    counting.wait_until(|c| c.waits() >= 24).await;
    let listeners = until_listeners(&t.url, &t.application_name, "the listener", |pids| !pids.is_empty()).await;
    assert_eq!(listeners.len(), 1, "one LISTEN connection per store: {listeners:?}");
    let backends = postgres_server::backend_count(&t.url, &t.application_name).await;
    assert!(backends <= 8 + 1, "{backends} backends: the pool (8) and one listener at most");

    let released_at = Instant::now();
    for lock in held {
        assert!(lock.release().await.unwrap());
    }
    for waiter in waiters {
        let acquired_at = waiter.await.unwrap().expect("every waiter gets its lock");
        let after = acquired_at - released_at;
        assert!(after < Duration::from_secs(10), "a waiter got its lock {after:?} after the release (retry {retry:?})");
    }
    assert_eq!(postgres_server::listener_backends(&t.url, &t.application_name).await.len(), 1);
    t.drop().await;
}

/// The listener's backend is terminated while a waiter (retry interval 10 s) waits and the
/// holder releases right after: the waiter still gets the lock quickly (waiters return
/// when the listener goes down and poll until it is back), the listener re-connects on
/// its own, and hand-off is notified again (retry 2 s, hand-off < 500 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_listener_falls_back_to_polling_and_notifications_come_back() {
    let Some(t) = TestTable::new("terminated_listener_falls_back_to_polling").await else { return };
    let store: Arc<DynLockStore> = Arc::new(t.store.clone());
    let counting = CountingStore::new(Arc::clone(&store));
    let locks = LockManager::new(counting.clone());
    let name = postgres_server::random_identifier("relisten");
    for round in 0..3 {
        let held = locks.lock(&name, Duration::from_secs(60)).await.unwrap();
        let waits = counting.waits();
        let waiter = tokio::spawn({
            let (locks, name) = (locks.clone(), name.clone());
            async move {
                let lock = locks
                    .lock_opts(
                        &name,
                        Duration::from_secs(60),
                        &LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(10)),
                    )
                    .await?;
                let acquired_at = Instant::now();
                lock.release().await?;
                Ok::<_, LockError>(acquired_at)
            }
        });
        counting.wait_until(|c| c.waits() > waits).await;
        let before = until_listeners(&t.url, &t.application_name, "the listener", |pids| !pids.is_empty()).await;
        let killed = postgres_server::terminate_listeners(&t.url, &t.application_name).await;
        assert_eq!(killed, 1, "round {round}: listener backends {before:?}");
        let released_at = Instant::now();
        assert!(held.release().await.unwrap());
        let acquired_at = waiter.await.unwrap().expect("the waiter gets the lock");
        let after = acquired_at - released_at;
        assert!(after < Duration::from_secs(5), "round {round}: the waiter was stuck for {after:?} (retry 10 s)");

        let after_restart = until_listeners(&t.url, &t.application_name, "a new listener", |pids| {
            pids.len() == 1 && !before.contains(&pids[0])
        })
        .await;
        assert_eq!(after_restart.len(), 1);
        distlock_conformance::cases::waiter_wakes_on_release_not_by_polling(Arc::clone(&store)).await;
    }
    t.drop().await;
}

/// `release_notifications(false)`: release sends no notification (a marker sent after it
/// is the first thing the channel carries), the capability says so, and waiting is
/// sleeping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_store_releases_without_notifying() {
    let Some(t) = TestTable::new("silent_store_releases_without_notifying").await else { return };
    let table = t.store.table_name();
    let table = table.rsplit('.').next().unwrap().trim_matches('"').to_owned();
    let silent = distlock_postgres::PostgresLockStore::builder()
        .schema(common::TEST_SCHEMA)
        .table(table)
        .release_notifications(false)
        .max_connections(2)
        .connect(&t.url)
        .await
        .unwrap();
    assert!(!silent.capabilities().release_notifications);
    assert!(!silent.statements().release().contains("pg_notify"));
    let channel = silent.statements().channel().to_owned();
    let mut listener = PgListener::connect(&t.url).await.unwrap();
    listener.listen(&channel).await.unwrap();
    let (k, holder) = (key("silent"), Token::generate());
    assert!(silent.try_acquire(&k, &holder, ttl(30_000)).await.unwrap().is_acquired());
    assert!(silent.release(&k, &holder).await.unwrap());
    sqlx::query("SELECT pg_notify($1, 'marker')").bind(&channel).execute(silent.pool()).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), listener.recv()).await.expect("marker").unwrap();
    assert_eq!(first.payload(), "marker", "the silent release notified");

    let started = Instant::now();
    silent.wait_for_release(&k, Duration::from_millis(300)).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(290), "{:?}", started.elapsed());
    silent.pool().close().await;
    t.drop().await;
}

/// Reads the `waiting` flag of `key`'s row (`None`: no row).
async fn waiting_flag(t: &TestTable, key: &distlock_api::StoreKey) -> Option<bool> {
    let sql = format!("SELECT waiting FROM {} WHERE key = $1", t.store.table_name());
    sqlx::query_scalar(&sql).bind(key.as_str()).fetch_optional(t.store.pool()).await.unwrap()
}

/// Sends `marker` on `channel` and returns the payloads received up to and including it
/// (notifications arrive in commit order, so whatever a release committed before the
/// marker sent is in the list; nothing is timed).
async fn received_until_marker(t: &TestTable, listener: &mut PgListener, channel: &str, marker: &str) -> Vec<String> {
    sqlx::query("SELECT pg_notify($1, $2)").bind(channel).bind(marker).execute(t.store.pool()).await.unwrap();
    let mut received = Vec::new();
    while received.last().map(String::as_str) != Some(marker) {
        let notification =
            tokio::time::timeout(Duration::from_secs(10), listener.recv()).await.expect("notification").unwrap();
        received.push(notification.payload().to_owned());
    }
    received
}

/// A release nobody waits for sends no notification (so it takes no cluster-wide notify
/// lock): neither for a new row, a re-acquired released row nor an expired-and-taken-over
/// one. Checked twice: a marker sent afterwards is the first thing the channel carries,
/// and nothing at all arrives within 300 ms of the releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_release_sends_no_notification() {
    let Some(t) = TestTable::new("uncontended_release_sends_no_notification").await else { return };
    let channel = t.store.statements().channel().to_owned();
    let mut listener = PgListener::connect(&t.url).await.unwrap();
    listener.listen(&channel).await.unwrap();
    let k = key("quiet");
    for round in 0..5 {
        let holder = Token::generate();
        assert!(t.store.try_acquire(&k, &holder, ttl(30_000)).await.unwrap().is_acquired(), "round {round}");
        assert!(t.store.release(&k, &holder).await.unwrap(), "round {round}");
    }
    // Taken over after expiry, then released.
    assert!(t.store.try_acquire(&k, &Token::generate(), ttl(30_000)).await.unwrap().is_acquired());
    t.age(&k, "1 second").await;
    let holder = Token::generate();
    assert!(t.store.try_acquire(&k, &holder, ttl(30_000)).await.unwrap().is_acquired());
    assert!(t.store.release(&k, &holder).await.unwrap());
    let silence = tokio::time::timeout(Duration::from_millis(300), listener.recv()).await;
    assert!(silence.is_err(), "an uncontended release notified: {silence:?}");
    assert_eq!(received_until_marker(&t, &mut listener, &channel, "marker").await, ["marker"]);
    assert_eq!(waiting_flag(&t, &k).await, Some(false));
    t.drop().await;
}

/// A waiter flags the lease; the release then notifies (exactly once, with the key), the
/// waiter wakes long before its 20 s `max`, and the next acquisition clears the flag, so
/// the following uncontended release is silent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_with_a_waiter_notifies_and_the_waiter_wakes_quickly() {
    let Some(t) = TestTable::new("release_with_a_waiter_notifies_and_the_waiter_wakes_quickly").await else {
        return;
    };
    let channel = t.store.statements().channel().to_owned();
    let mut listener = PgListener::connect(&t.url).await.unwrap();
    listener.listen(&channel).await.unwrap();
    let (k, holder) = (key("waited"), Token::generate());
    assert!(t.store.try_acquire(&k, &holder, ttl(60_000)).await.unwrap().is_acquired());
    assert_eq!(waiting_flag(&t, &k).await, Some(false));
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let (store, k) = (t.store.clone(), k.clone());
            tokio::spawn(async move {
                store.wait_for_release(&k, Duration::from_secs(20)).await.unwrap();
                Instant::now()
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiting_flag(&t, &k).await != Some(true) {
        assert!(Instant::now() < deadline, "the waiters never flagged the lease");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Give both waiters time to flag (or find it flagged) and sleep; neither returns early
    // for good (a waiter may retry at once once, which the loop below tolerates).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    assert!(t.store.release(&k, &holder).await.unwrap());
    for waiter in waiters {
        let woke_at = waiter.await.unwrap();
        let after = woke_at.saturating_duration_since(released_at);
        assert!(after < Duration::from_secs(3), "a waiter woke {after:?} after the release (max 20 s)");
    }
    assert_eq!(received_until_marker(&t, &mut listener, &channel, "marker 1").await, [k.as_str(), "marker 1"]);

    let next = Token::generate();
    assert!(t.store.try_acquire(&k, &next, ttl(60_000)).await.unwrap().is_acquired());
    assert_eq!(waiting_flag(&t, &k).await, Some(false), "acquire clears the flag");
    assert!(t.store.release(&k, &next).await.unwrap());
    assert_eq!(received_until_marker(&t, &mut listener, &channel, "marker 2").await, ["marker 2"]);
    t.drop().await;
}

/// Races a waiter's flag against the release: in each of 150 rounds a waiter starts
/// waiting (max 20 s) while the holder releases after a random 0–3 ms, so the flag lands
/// before, during or after the release. Whatever the interleaving, the waiter is back
/// within 3 s (notified, or finding the key free) — no wake-up is missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flag_racing_the_release_never_misses_the_wake_up() {
    let Some(t) = TestTable::new("a_flag_racing_the_release_never_misses_the_wake_up").await else { return };
    let k = key("race");
    // Start the listener first, so that every round takes the notified path.
    t.store.wait_for_release(&k, Duration::from_secs(20)).await.unwrap();
    let mut seed = u64::from(std::process::id()) | 1;
    for round in 0..150 {
        let holder = Token::generate();
        assert!(t.store.try_acquire(&k, &holder, ttl(60_000)).await.unwrap().is_acquired(), "round {round}");
        let waiter = tokio::spawn({
            let (store, k) = (t.store.clone(), k.clone());
            async move { store.wait_for_release(&k, Duration::from_secs(20)).await.unwrap() }
        });
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(Duration::from_micros(seed % 3_000)).await;
        let released_at = Instant::now();
        assert!(t.store.release(&k, &holder).await.unwrap(), "round {round}");
        tokio::time::timeout(Duration::from_secs(3), waiter)
            .await
            .unwrap_or_else(|_| {
                panic!("round {round}: the waiter slept through the release ({:?} ago)", released_at.elapsed())
            })
            .unwrap();
    }
    t.drop().await;
}

/// The last statement the store's one pool connection ran (its listener aside).
async fn last_statement(t: &TestTable) -> String {
    let sql = "SELECT query FROM pg_stat_activity \
               WHERE application_name = $1 AND backend_type = 'client backend' AND query NOT LIKE 'LISTEN%'";
    let mut conn = postgres_server::admin_connection(&t.url).await;
    let queries: Vec<String> =
        sqlx::query_scalar(sql).bind(&t.application_name).fetch_all(&mut conn).await.expect("pg_stat_activity");
    let _ = sqlx::Connection::close(conn).await;
    match <[String; 1]>::try_from(queries) {
        Ok([query]) => query,
        Err(queries) => panic!("expected one pool connection, found {}", queries.len()),
    }
}

/// A waiter whose store saw the release hand it the key (the `turn:` notification) takes
/// the lease with the one-`UPDATE` statement (`queue/take_handed.sql`), keeping the fence
/// the release gave it, for its own TTL, and leaving the line. When the handed lease has
/// lapsed and gone to another token meanwhile, its attempt queues again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_handed_the_key_takes_it_with_one_update() {
    let test = "a_waiter_handed_the_key_takes_it_with_one_update";
    // One pool connection: its last statement is the attempt's.
    let Some(t) = TestTable::sized(test, false, 1).await else { return };
    let store = &t.store;
    let queue = store.queue().expect("the PostgreSQL store has a fair queue");
    let k = key("handed");
    let long = ttl(30_000);
    let handed_to = |waiter: &Token, place: Ttl| {
        let (store, k, waiter) = (store.clone(), k.clone(), waiter.clone());
        async move {
            let queue = store.queue().unwrap();
            let holder = Token::generate();
            let taken = queue.try_acquire_queued(QueuedAttempt { key: &k, token: &holder, ttl: long, place }).await;
            let Acquire::Acquired { fence: Some(holder_fence) } = taken.unwrap() else { panic!("not taken") };
            let queued = queue.try_acquire_queued(QueuedAttempt { key: &k, token: &waiter, ttl: long, place }).await;
            assert!(!queued.unwrap().is_acquired());
            let woken = tokio::spawn({
                let (store, k, waiter) = (store.clone(), k.clone(), waiter.clone());
                async move { store.queue().unwrap().wait_for_turn(&k, &waiter, Duration::from_secs(20)).await }
            });
            // The waiter registers before it flags the lease.
            let flagged = format!("SELECT waiting FROM {} WHERE key = $1", store.table_name());
            let deadline = Instant::now() + Duration::from_secs(10);
            while !sqlx::query_scalar::<_, bool>(&flagged).bind(k.as_str()).fetch_one(store.pool()).await.unwrap() {
                assert!(Instant::now() < deadline, "the waiter never flagged the lease");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let released_at = Instant::now();
            assert!(store.release(&k, &holder).await.unwrap());
            woken.await.unwrap().unwrap();
            let woken_after = released_at.elapsed();
            assert!(woken_after < Duration::from_secs(10), "the waiter handed the key woke after {woken_after:?}");
            holder_fence
        }
    };

    let waiter = Token::generate();
    let holder_fence = handed_to(&waiter, long).await;
    let taken = queue.try_acquire_queued(QueuedAttempt { key: &k, token: &waiter, ttl: long, place: long }).await;
    let Acquire::Acquired { fence: Some(fence) } = taken.unwrap() else { panic!("the handed key was not taken") };
    let statement = last_statement(&t).await;
    assert!(
        statement.contains("WITH taken AS") && !statement.contains("RECURSIVE"),
        "the handed lease was not taken by take_handed.sql: {statement}"
    );
    assert!(fence > holder_fence, "fence {fence} after {holder_fence}");
    let info = store.inspect(&k).await.unwrap().expect("held");
    assert_eq!((info.token, info.fence), (waiter.clone(), Some(fence)));
    assert!(info.ttl_left > Duration::from_secs(25), "the lease lasts the waiter's TTL: {:?}", info.ttl_left);
    assert_eq!(queue.queue_len(&k).await.unwrap(), 0, "the waiter's place stayed");
    assert!(store.release(&k, &waiter).await.unwrap());

    // Handed a lease that lapses (it lasts the rest of the waiter's 2 s place) and is
    // taken by another token before the waiter's attempt.
    let late = Token::generate();
    let place = ttl(2_000);
    handed_to(&late, place).await;
    assert_eq!(store.inspect(&k).await.unwrap().map(|info| info.token), Some(late.clone()), "not handed");
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.inspect(&k).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the handed lease never lapsed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let other = Token::generate();
    assert!(store.try_acquire(&k, &other, long).await.unwrap().is_acquired());
    let queued = queue.try_acquire_queued(QueuedAttempt { key: &k, token: &late, ttl: long, place }).await.unwrap();
    assert!(!queued.is_acquired(), "the lease of another token was taken");
    let places = queue.queue_places(&k).await.unwrap();
    assert_eq!(places.iter().map(|place| &place.token).collect::<Vec<_>>(), [&late], "{places:?}");
    assert!(store.release(&k, &other).await.unwrap());
    t.drop().await;
}
