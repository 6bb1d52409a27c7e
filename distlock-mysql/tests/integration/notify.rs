//! Release notifications across stores (each with its own listener connection), and what
//! a waiter does when its listener is killed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{
    Acquire, GroupMember, LockGroup, LockKey, LockManager, LockOptions, LockStore, QueuedAttempt, StoreKey, Token, Ttl,
};
use distlock_conformance::kit::mysql_server::{self, MysqlServer};
use distlock_conformance::kit::{self};
use distlock_mysql::{sqlx, MysqlLockStore};

fn name(case: &str) -> String {
    format!("notify:{}:{case}", Token::generate().short())
}

/// Waits until `count` registrations (one per waiting token) exist for `key`.
async fn wait_for_registrations(store: &MysqlLockStore, key: &StoreKey, count: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM distribute_lock_waiters WHERE lock_key = ?")
            .bind(key.as_str())
            .fetch_one(store.pool())
            .await
            .unwrap();
        if found >= count {
            return;
        }
        assert!(Instant::now() < deadline, "{found} of {count} waiters registered");
        tokio::task::yield_now().await;
    }
}

/// A release through one store wakes a waiter of another store (another pool, another
/// listener) long before the waiter's 5 s retry interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_of_another_store() {
    let Some(url) = kit::mysql_url("mysql notify across stores") else { return };
    let (holder_store, waiter_store) =
        (MysqlLockStore::connect(&url).await.unwrap(), MysqlLockStore::connect(&url).await.unwrap());
    holder_store.ensure_schema().await.unwrap();
    let (holders, waiters) =
        (LockManager::new(Arc::new(holder_store.clone())), LockManager::new(Arc::new(waiter_store)));
    let name = name("across");
    let key = LockKey::new(name.as_str()).unwrap().to_store_key();
    let held = holders.lock(&name, Duration::from_secs(30)).await.unwrap();
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let options = LockOptions::new().wait(Duration::from_secs(20)).retry_interval(Duration::from_secs(5));
            let lock = waiters.lock_opts(&name, Duration::from_secs(30), &options).await.unwrap();
            let at = Instant::now();
            lock.release().await.unwrap();
            at
        }
    });
    wait_for_registrations(&holder_store, &key, 1).await;
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    let acquired_at = waiter.await.unwrap();
    let hand_off = acquired_at - released_at;
    assert!(hand_off < Duration::from_millis(1_500), "hand-off took {hand_off:?} with a 5 s retry interval");
}

/// The waiter's listener (with every other connection of its user) is killed while it
/// waits: the waiter still gets the lock after the release, within its retry interval
/// and the listener's reconnection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_listener_falls_back_to_the_retry_interval() {
    let Some(server) = MysqlServer::start_or_skip("mysql killed listener") else { return };
    let app_url = server.create_user("distlock_waiter").await;
    let holder_store = MysqlLockStore::connect(&server.url()).await.unwrap();
    holder_store.ensure_schema().await.unwrap();
    let waiter_store = MysqlLockStore::connect(&app_url).await.unwrap();
    let (holders, waiters) =
        (LockManager::new(Arc::new(holder_store.clone())), LockManager::new(Arc::new(waiter_store)));
    let name = name("killed-listener");
    let key = LockKey::new(name.as_str()).unwrap().to_store_key();
    let held = holders.lock(&name, Duration::from_secs(30)).await.unwrap();
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let options = LockOptions::new().wait(Duration::from_secs(20)).retry_interval(Duration::from_millis(500));
            let lock = waiters.lock_opts(&name, Duration::from_secs(30), &options).await.unwrap();
            let at = Instant::now();
            lock.release().await.unwrap();
            at
        }
    });
    wait_for_registrations(&holder_store, &key, 1).await;
    let killed = mysql_server::kill_connections(&server.url(), "distlock_waiter").await;
    assert!(killed > 0, "the waiter's connections were not found");
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    let acquired_at = waiter.await.unwrap();
    let hand_off = acquired_at - released_at;
    assert!(hand_off < Duration::from_secs(5), "hand-off took {hand_off:?} after the listener was killed");
    assert!(holder_store.inspect(&key).await.unwrap().is_none());
}

/// Waits until `store`'s groups have `count` waiting places on `key`.
async fn wait_for_places(store: &MysqlLockStore, key: &StoreKey, count: usize) {
    let groups = store.groups().expect("groups");
    let deadline = Instant::now() + Duration::from_secs(20);
    while groups.waiting(key).await.unwrap() < count {
        assert!(Instant::now() < deadline, "the waiting groups never took their places");
        tokio::task::yield_now().await;
    }
}

/// A group release through one store wakes a group waiting through another store long
/// before the waiter's 30 s retry interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_release_wakes_a_waiting_group_of_another_store() {
    let Some(url) = kit::mysql_url("mysql group notify across stores") else { return };
    let (holder_store, waiter_store) =
        (MysqlLockStore::connect(&url).await.unwrap(), MysqlLockStore::connect(&url).await.unwrap());
    holder_store.ensure_schema().await.unwrap();
    let (holders, waiters) =
        (LockManager::new(Arc::new(holder_store.clone())), LockManager::new(Arc::new(waiter_store)));
    let (a, b) = (name("group-a"), name("group-b"));
    let group = LockGroup::new([GroupMember::exclusive(&a).unwrap(), GroupMember::exclusive(&b).unwrap()]).unwrap();
    let held = holders.lock_group(&group, Duration::from_secs(30)).await.unwrap();
    let waiter = tokio::spawn({
        let group = group.clone();
        async move {
            let options = LockOptions::new().wait(Duration::from_secs(25)).retry_interval(Duration::from_secs(30));
            let lock = waiters.lock_group_opts(&group, Duration::from_secs(30), &options).await.unwrap();
            let at = Instant::now();
            lock.release().await.unwrap();
            at
        }
    });
    let key = LockKey::new(a.as_str()).unwrap().to_store_key();
    wait_for_places(&holder_store, &key, 1).await;
    wait_for_registrations(&holder_store, &key, 1).await;
    // The waiter registers, then checks that the group is still held, then sleeps; nothing
    // tells when it sleeps. A release before the check would end its wait without a
    // wake-up, so give it time to reach the sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    held.release().await.unwrap();
    let acquired_at = waiter.await.unwrap();
    let hand_off = acquired_at - released_at;
    assert!(hand_off < Duration::from_millis(1_500), "hand-off took {hand_off:?} with a 30 s retry interval");
}

/// A writer waiting among readers holds a place that keeps later readers waiting; when
/// the writer gives up, its withdrawal wakes the reader behind it, which then shares the
/// name with the reader holding it — long before the reader's 30 s retry interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_place_wakes_the_group_behind_it() {
    let Some(url) = kit::mysql_url("mysql withdrawal notify") else { return };
    let store = MysqlLockStore::connect(&url).await.unwrap();
    store.ensure_schema().await.unwrap();
    let locks = LockManager::new(Arc::new(store.clone()));
    let name = name("withdrawn");
    let key = LockKey::new(name.as_str()).unwrap().to_store_key();
    let reading = locks.lock_read(&name, Duration::from_secs(30)).await.unwrap();
    let writer = tokio::spawn({
        let (locks, name) = (locks.clone(), name.clone());
        async move {
            let group = LockGroup::single(GroupMember::exclusive(&name).unwrap()).unwrap();
            let options = LockOptions::new().wait(Duration::from_secs(2)).retry_interval(Duration::from_secs(30));
            let outcome = locks.lock_group_opts(&group, Duration::from_secs(30), &options).await;
            (outcome.map(drop), Instant::now())
        }
    });
    wait_for_places(&store, &key, 1).await;
    let reader = tokio::spawn({
        let (locks, name) = (locks.clone(), name.clone());
        async move {
            let group = LockGroup::single(GroupMember::shared(&name).unwrap()).unwrap();
            let options = LockOptions::new().wait(Duration::from_secs(25)).retry_interval(Duration::from_secs(30));
            let lock = locks.lock_group_opts(&group, Duration::from_secs(30), &options).await.unwrap();
            let at = Instant::now();
            lock.release().await.unwrap();
            at
        }
    });
    wait_for_places(&store, &key, 2).await;
    let (gave_up, withdrawn_at) = writer.await.unwrap();
    assert!(matches!(gave_up, Err(distlock_api::LockError::NotAcquired { .. })), "{gave_up:?}");
    let acquired_at = reader.await.unwrap();
    let woken = acquired_at.saturating_duration_since(withdrawn_at);
    assert!(woken < Duration::from_millis(1_500), "the reader took {woken:?} after the writer gave up");
    reading.release().await.unwrap();
}

/// A release that hands the key to the oldest queued waiter wakes that waiter only: not
/// the waiter behind it in the same store, nor the one in another store (whose listener
/// is not interrupted). The next release then wakes the next in line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_wakes_only_the_waiter_it_went_to() {
    let Some(url) = kit::mysql_url("mysql targeted wake") else { return };
    let holder_store = MysqlLockStore::connect(&url).await.unwrap();
    holder_store.ensure_schema().await.unwrap();
    let (local, remote) = (MysqlLockStore::connect(&url).await.unwrap(), MysqlLockStore::connect(&url).await.unwrap());
    let key = LockKey::new(name("targeted").as_str()).unwrap().to_store_key();
    let (ttl, place) = (Ttl::new(Duration::from_secs(30)).unwrap(), Ttl::new(Duration::from_secs(30)).unwrap());
    let [holder, first, second, third] = [(); 4].map(|()| Token::generate());
    let attempt = |token| QueuedAttempt { key: &key, token, ttl, place };
    assert!(holder_store.queue().unwrap().try_acquire_queued(attempt(&holder)).await.unwrap().is_acquired());
    // In line: `first` (this store), `second` (another store), `third` (this store).
    for (store, token) in [(&local, &first), (&remote, &second), (&local, &third)] {
        assert!(!store.queue().unwrap().try_acquire_queued(attempt(token)).await.unwrap().is_acquired());
    }
    let wait = |store: &MysqlLockStore, token: &Token| {
        let (store, key, token) = (store.clone(), key.clone(), token.clone());
        tokio::spawn(async move {
            store.queue().unwrap().wait_for_turn(&key, &token, Duration::from_secs(20)).await.unwrap();
            Instant::now()
        })
    };
    let (first_woken, mut second_woken, mut third_woken) =
        (wait(&local, &first), wait(&remote, &second), wait(&local, &third));
    wait_for_registrations(&holder_store, &key, 3).await;

    let released_at = Instant::now();
    assert!(holder_store.release(&key, &holder).await.unwrap());
    let woken = first_woken.await.unwrap() - released_at;
    assert!(woken < Duration::from_millis(1_500), "the waiter handed the key woke after {woken:?}");
    // The others sleep on: each would sleep until the handed lease ends (30 s).
    let quiet = tokio::time::timeout(Duration::from_millis(500), async {
        tokio::select! {
            _ = &mut second_woken => "the waiter in another store",
            _ = &mut third_woken => "the waiter behind it in the same store",
        }
    })
    .await;
    assert!(quiet.is_err(), "{} was woken by a hand-off to another waiter", quiet.unwrap_or_default());
    // Nor was the other store's listener interrupted: its sleep began before the release.
    let since_release = released_at.elapsed();
    let listener: i64 =
        sqlx::query_scalar("SELECT listener FROM distribute_lock_waiters WHERE lock_key = ? AND token = ?")
            .bind(key.as_str())
            .bind(second.as_str())
            .fetch_one(holder_store.pool())
            .await
            .unwrap();
    let asleep_ms: i64 =
        sqlx::query_scalar("SELECT CAST(TIME_MS AS SIGNED) FROM information_schema.PROCESSLIST WHERE ID = ?")
            .bind(listener)
            .fetch_one(holder_store.pool())
            .await
            .unwrap();
    assert!(
        u128::try_from(asleep_ms).unwrap() >= since_release.as_millis(),
        "the other store's listener sleeps since {asleep_ms} ms, the release was {since_release:?} ago"
    );

    // The registration of the waiter handed the key goes: a hot key's table holds only
    // those still waiting.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM distribute_lock_waiters WHERE lock_key = ? AND token = ?")
                .bind(key.as_str())
                .bind(first.as_str())
                .fetch_one(holder_store.pool())
                .await
                .unwrap();
        if left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the registration of the waiter handed the key stayed");
        tokio::task::yield_now().await;
    }
    assert!(local.queue().unwrap().try_acquire_queued(attempt(&first)).await.unwrap().is_acquired());
    let released_at = Instant::now();
    assert!(local.release(&key, &first).await.unwrap());
    let woken = second_woken.await.unwrap() - released_at;
    assert!(woken < Duration::from_millis(1_500), "the next waiter, in another store, woke after {woken:?}");
    third_woken.abort();
}

/// Counts the warnings logged in the current thread.
#[derive(Clone, Default)]
struct Warnings(Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() <= tracing::Level::WARN {
            let mut fields = String::new();
            event.record(&mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                fields.push_str(&format!("{}={value:?} ", field.name()));
            });
            self.0.lock().unwrap().push(fields);
        }
    }
}

/// A waiter woken after more than a second logs nothing: the listener's sleep lasts
/// by design and is no slow statement (sqlx warns of statements over 1 s).
#[tokio::test(flavor = "current_thread")]
async fn a_long_wait_logs_no_slow_statement() {
    use tracing_subscriber::layer::SubscriberExt;
    let Some(url) = kit::mysql_url("mysql listener logging") else { return };
    let warnings = Warnings::default();
    let _logging = tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let (holder_store, waiter_store) =
        (MysqlLockStore::connect(&url).await.unwrap(), MysqlLockStore::connect(&url).await.unwrap());
    holder_store.ensure_schema().await.unwrap();
    let (holders, waiters) =
        (LockManager::new(Arc::new(holder_store.clone())), LockManager::new(Arc::new(waiter_store)));
    let name = name("long-wait");
    let key = LockKey::new(name.as_str()).unwrap().to_store_key();
    let held = holders.lock(&name, Duration::from_secs(30)).await.unwrap();
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let options = LockOptions::new().wait(Duration::from_secs(20)).retry_interval(Duration::from_secs(10));
            waiters.lock_opts(&name, Duration::from_secs(30), &options).await.unwrap().release().await.unwrap();
        }
    });
    wait_for_registrations(&holder_store, &key, 1).await;
    // Longer than sqlx's slow-statement threshold of 1 s.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert!(held.release().await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("the waiter was woken").unwrap();
    let logged = warnings.0.lock().unwrap().clone();
    assert!(logged.is_empty(), "warnings: {logged:?}");
}

/// How many transactions the one connection of `store`'s pool has begun.
async fn transactions_begun(store: &MysqlLockStore) -> u64 {
    let (_, count): (String, String) =
        sqlx::query_as("SHOW SESSION STATUS LIKE 'Com_begin'").fetch_one(store.pool()).await.unwrap();
    count.parse().unwrap()
}

/// A waiter a release hands the key to takes it with one token-checked `UPDATE`, in no
/// transaction, keeping the fence the release gave it and leaving the line. When the
/// handed lease has lapsed and gone to another token meanwhile, its attempt queues
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_handed_the_key_takes_it_without_a_transaction() {
    let Some(url) = kit::mysql_url("mysql handed lease") else { return };
    // One connection: every statement of the store's pool goes through the session
    // whose counter is read.
    let store = MysqlLockStore::builder().max_connections(1).connect(&url).await.unwrap();
    store.ensure_schema().await.unwrap();
    let queue = store.queue().unwrap();
    let key = LockKey::new(name("handed").as_str()).unwrap().to_store_key();
    let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
    let attempt = |token, place| QueuedAttempt { key: &key, token, ttl, place };
    let handed_to = |waiter: &Token, place: Ttl| {
        let (store, key, waiter) = (store.clone(), key.clone(), waiter.clone());
        async move {
            let queue = store.queue().unwrap();
            let holder = Token::generate();
            let taken = queue.try_acquire_queued(QueuedAttempt { key: &key, token: &holder, ttl, place }).await;
            let Acquire::Acquired { fence: Some(holder_fence) } = taken.unwrap() else { panic!("not taken") };
            let queued = queue.try_acquire_queued(QueuedAttempt { key: &key, token: &waiter, ttl, place }).await;
            assert!(!queued.unwrap().is_acquired());
            let woken = tokio::spawn({
                let (store, key, waiter) = (store.clone(), key.clone(), waiter.clone());
                async move { store.queue().unwrap().wait_for_turn(&key, &waiter, Duration::from_secs(20)).await }
            });
            wait_for_registrations(&store, &key, 1).await;
            let released_at = Instant::now();
            assert!(store.release(&key, &holder).await.unwrap());
            woken.await.unwrap().unwrap();
            let woken_after = released_at.elapsed();
            assert!(woken_after < Duration::from_secs(10), "the waiter handed the key woke after {woken_after:?}");
            holder_fence
        }
    };

    let waiter = Token::generate();
    let holder_fence = handed_to(&waiter, Ttl::new(Duration::from_secs(30)).unwrap()).await;
    let begun = transactions_begun(&store).await;
    let taken = queue.try_acquire_queued(attempt(&waiter, Ttl::new(Duration::from_secs(30)).unwrap())).await;
    let Acquire::Acquired { fence: Some(fence) } = taken.unwrap() else { panic!("the handed key was not taken") };
    assert_eq!(transactions_begun(&store).await, begun, "the handed lease was taken in a transaction");
    assert!(fence > holder_fence, "fence {fence} after {holder_fence}");
    let info = store.inspect(&key).await.unwrap().expect("held");
    assert_eq!((info.token, info.fence), (waiter.clone(), Some(fence)));
    assert!(info.ttl_left > Duration::from_secs(25), "the lease lasts the waiter's TTL: {:?}", info.ttl_left);
    assert_eq!(queue.queue_len(&key).await.unwrap(), 0, "the waiter's place stayed");
    assert!(store.release(&key, &waiter).await.unwrap());

    // Handed a lease that lapses (it lasts the rest of the waiter's 2 s place) and is
    // taken by another token before the waiter's attempt.
    let late = Token::generate();
    let place = Ttl::new(Duration::from_secs(2)).unwrap();
    handed_to(&late, place).await;
    let handed = store.inspect(&key).await.unwrap().map(|info| info.token);
    assert_eq!(handed, Some(late.clone()), "the key was not handed to the waiter");
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.inspect(&key).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the handed lease never lapsed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let other = Token::generate();
    assert!(store.try_acquire(&key, &other, ttl).await.unwrap().is_acquired());
    let begun = transactions_begun(&store).await;
    let queued = queue.try_acquire_queued(attempt(&late, place)).await.unwrap();
    assert!(!queued.is_acquired(), "the lease of another token was taken");
    assert_eq!(transactions_begun(&store).await, begun + 1, "the attempt did not queue in its transaction");
    let places = queue.queue_places(&key).await.unwrap();
    assert_eq!(places.iter().map(|place| &place.token).collect::<Vec<_>>(), [&late], "{places:?}");
    assert!(store.release(&key, &other).await.unwrap());
}
