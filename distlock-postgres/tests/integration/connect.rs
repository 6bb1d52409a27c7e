//! Connecting: the layout in the URL, errors with the real cause (promptly, never with
//! the password), `create=false` for a role without DDL rights, and durations at their
//! extremes. Every test works in its own random schema.

use crate::common;

use std::time::{Duration, Instant};

use common::key;
use distlock_api::{GroupAcquire, GroupRequest, LockError, LockMode, LockStore, OwnerId, StoreMember, Token, Ttl};
use distlock_conformance::kit::{self, postgres_server};
use distlock_postgres::{sqlx, GroupSchemaMissing, PostgresLockStore, PostgresUrl, PurgeOptions, MIN_PURGE_HORIZON};

/// A URL with `params` appended to `url`'s query.
fn with_params(url: &str, params: &str) -> String {
    format!("{url}{}{params}", if url.contains('?') { '&' } else { '?' })
}

/// `url` with its user info replaced by `user_info` (`user` or `user:password`) and its
/// database by `database`.
fn rewritten(url: &str, user_info: &str, database: &str) -> String {
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    format!("postgres://{user_info}@{}:{}/{database}", options.get_host(), options.get_port())
}

fn store_error_cause(err: &LockError, operation: &str) -> String {
    match err {
        LockError::Store { backend: "postgres", operation: op, .. } if *op == operation => {
            err.cause().expect("a cause").to_string()
        }
        other => panic!("expected a postgres store error for {operation}, got {other:?}"),
    }
}

/// The typed cause of a group operation refused because the group objects are missing.
fn group_schema_missing(err: &LockError) -> &GroupSchemaMissing {
    err.cause().and_then(|cause| cause.downcast_ref::<GroupSchemaMissing>()).unwrap_or_else(|| panic!("{err:?}"))
}

/// A random schema, dropped (with everything in it) by [`Schema::drop`].
struct Schema {
    url: String,
    name: String,
}

impl Schema {
    fn new(url: &str) -> Self {
        Self { url: url.to_owned(), name: postgres_server::random_identifier("dl_connect") }
    }

    async fn drop(self) {
        postgres_server::execute(&self.url, &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_reported_at_once_with_its_cause() {
    let started = Instant::now();
    // The default acquire timeout is 5 s; the pool alone would retry until then.
    let err = PostgresLockStore::connect("postgres://postgres:pw-not-shown@127.0.0.1:1/x").await.unwrap_err();
    let elapsed = started.elapsed();
    let cause = store_error_cause(&err, "connect");
    assert!(cause.to_lowercase().contains("refused"), "{err}");
    assert!(err.report().to_string().to_lowercase().contains("refused"), "one line with the root cause: {err}");
    assert!(elapsed < Duration::from_millis(1500), "took {elapsed:?}");
    assert!(!format!("{err} {err:?}").contains("pw-not-shown"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_or_role_fails_at_connect_with_the_servers_message() {
    let Some(url) = kit::postgres_url("a_missing_database_or_role_fails_at_connect") else { return };
    let database = postgres_server::random_identifier("no_such_db");
    let err = PostgresLockStore::connect(&rewritten(&url, "postgres:pw-not-shown", &database)).await.unwrap_err();
    let cause = store_error_cause(&err, "connect");
    assert!(cause.contains(&database) && cause.contains("does not exist"), "{err}");
    assert!(!format!("{err} {err:?}").contains("pw-not-shown"), "{err:?}");

    let role = postgres_server::random_identifier("no_such_role");
    let err = PostgresLockStore::connect(&rewritten(&url, &role, "postgres")).await.unwrap_err();
    let cause = store_error_cause(&err, "connect");
    assert!(cause.contains(&role), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_comes_from_the_url() {
    let Some(url) = kit::postgres_url("the_layout_comes_from_the_url") else { return };
    let schema = Schema::new(&url);
    let app = postgres_server::random_identifier("dl_url_app");
    let store_url = with_params(
        &url,
        &format!(
            "schema={}&table=leases&sequence=fences&unlogged=true&notifications=false&sslmode=disable&application_name={app}",
            schema.name
        ),
    );
    let store = PostgresLockStore::connect(&store_url).await.unwrap();
    store.ensure_schema().await.unwrap();
    assert_eq!(store.table_name(), format!("\"{}\".\"leases\"", schema.name));
    assert_eq!(store.sequence_name(), format!("\"{}\".\"fences\"", schema.name));
    assert!(store.is_unlogged() && !store.capabilities().release_notifications);
    let persistence: String = sqlx::query_scalar("SELECT relpersistence::text FROM pg_class WHERE oid = $1::regclass")
        .bind(store.table_name())
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(persistence, "u");
    let name: String =
        sqlx::query_scalar("SELECT current_setting('application_name')").fetch_one(store.pool()).await.unwrap();
    assert_eq!(name, app, "sqlx's own parameters pass through");
    let (k, token) = (key("url"), Token::generate());
    assert!(store.try_acquire(&k, &token, Ttl::new(Duration::from_secs(30)).unwrap()).await.unwrap().is_acquired());
    assert!(store.release(&k, &token).await.unwrap());

    // The builder may say the same thing; saying something else is refused.
    let agreeing = PostgresLockStore::builder().schema(&schema.name).unlogged(true).connect(&store_url).await;
    assert!(agreeing.is_ok(), "{agreeing:?}");
    for builder in [
        PostgresLockStore::builder().schema("public"),
        PostgresLockStore::builder().table("other"),
        PostgresLockStore::builder().unlogged(false),
        PostgresLockStore::builder().release_notifications(true),
    ] {
        let started = Instant::now();
        let err = builder.connect(&store_url).await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1), "refused before any I/O");
    }
    store.pool().close().await;
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_malformed_url_parameters_are_refused_before_any_io() {
    // Port 9 on TEST-NET-1: any connection attempt would hang for the acquire timeout.
    let base = "postgres://user:pw-not-shown@192.0.2.1:9/db";
    for (params, named) in [
        ("prefix=x", "`prefix`"),
        ("fencing=true", "`fencing`"),
        ("schema=a-b", "`schema`"),
        ("table=", "`table`"),
        ("sequence=1x", "`sequence`"),
        ("unlogged=maybe", "`unlogged`"),
        ("create=no", "`create`"),
        ("table=a&table=b", "`table`"),
    ] {
        let started = Instant::now();
        let err = PostgresLockStore::connect(&with_params(base, params)).await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{params}: {err}");
        assert!(err.to_string().contains(named), "{params}: {err}");
        assert!(!err.to_string().contains("pw-not-shown"), "{params}: {err}");
        assert!(started.elapsed() < Duration::from_secs(1), "{params}: I/O before refusing");
        assert!(PostgresUrl::parse(&with_params(base, params)).is_err(), "{params}");
    }
    for url in ["user:pw-not-shown@host/db?next=http://x", "redis://user:pw-not-shown@host", "pw-not-shown"] {
        let err = PostgresLockStore::connect(url).await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{err}");
        assert!(!err.to_string().contains("pw-not-shown"), "{err}");
    }
}

/// `create=false`: connect (and `ensure_schema`) only check, naming what is missing; a
/// role that may use the table but not create anything works once a DBA ran the DDL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_false_checks_the_layout_and_works_without_ddl_rights() {
    let Some(url) = kit::postgres_url("create_false_checks_the_layout") else { return };
    let schema = Schema::new(&url);
    let role = postgres_server::random_identifier("dl_locked_down");
    postgres_server::execute(&url, &format!("CREATE ROLE \"{role}\" NOLOGIN")).await;
    // The superuser of the test URL switches to the role at session start.
    let as_role = with_params(&url, &format!("options=-c%20role%3D{role}"));
    let layout = format!("schema={}&table=leases&create=false", schema.name);

    let err = PostgresLockStore::connect(&with_params(&as_role, &layout)).await.unwrap_err();
    let cause = store_error_cause(&err, "connect");
    assert!(cause.contains(&format!("schema \"{}\" does not exist", schema.name)), "{err}");
    assert!(cause.contains("Statements::ddl"), "says what to do: {err}");

    // A DBA creates the schema, the sequence and the table from the store's DDL.
    let owner = PostgresLockStore::builder()
        .schema(&schema.name)
        .table("leases")
        .build(sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&url).await.unwrap())
        .unwrap();
    postgres_server::execute(&url, &format!("CREATE SCHEMA \"{}\"", schema.name)).await;
    let err = PostgresLockStore::connect(&with_params(&as_role, &layout)).await.unwrap_err();
    let cause = store_error_cause(&err, "connect");
    assert!(cause.contains("no USAGE privilege on schema"), "{err}");
    for ddl in &owner.statements().ddl()[1..] {
        postgres_server::execute(&url, ddl).await;
    }
    postgres_server::execute(&url, &format!("GRANT USAGE ON SCHEMA \"{}\" TO \"{role}\"", schema.name)).await;
    let err = PostgresLockStore::connect(&with_params(&as_role, &layout)).await.unwrap_err();
    let cause = store_error_cause(&err, "connect");
    assert!(cause.contains("no SELECT, INSERT, UPDATE privilege on table"), "{err}");
    assert!(cause.contains("no USAGE privilege on sequence"), "{err}");
    let holders = format!("\"{}\".\"leases_holders\"", schema.name);
    let permits = format!("\"{}\".\"leases_permits\"", schema.name);
    assert!(!cause.contains(&holders), "group objects are checked at the first group operation: {err}");

    // The lease table alone is enough to connect and use single locks.
    postgres_server::execute(
        &url,
        &format!(
            "GRANT SELECT, INSERT, UPDATE ON {} TO \"{role}\"; GRANT USAGE ON SEQUENCE {} TO \"{role}\"",
            owner.table_name(),
            owner.sequence_name()
        ),
    )
    .await;
    let store = PostgresLockStore::connect(&with_params(&as_role, &layout)).await.unwrap();
    assert!(!store.creates_schema());
    store.ensure_schema().await.expect("only checks, and all is there");
    let (k, token) = (key("locked-down"), Token::generate());
    assert!(store.try_acquire(&k, &token, Ttl::new(Duration::from_secs(30)).unwrap()).await.unwrap().is_acquired());
    assert!(store.release(&k, &token).await.unwrap());
    let groups = store.groups().expect("groups");
    let members = [StoreMember::new(k.clone(), LockMode::Shared, None)];
    let owner_id = OwnerId::new("test", "locked-down").unwrap();
    let request =
        GroupRequest::new(&members, &token, &owner_id, Ttl::new(Duration::from_secs(30)).unwrap(), None, None);
    let err = groups.try_acquire_group(request).await.unwrap_err();
    let missing = group_schema_missing(&err);
    assert!(
        missing.missing().contains(&format!("no SELECT, INSERT, UPDATE, DELETE privilege on table {holders}")),
        "{err}"
    );
    assert!(missing.missing().contains(&format!("no SELECT privilege on table {permits}")), "{err}");

    postgres_server::execute(
        &url,
        &format!("GRANT SELECT, INSERT, UPDATE, DELETE ON {holders}, {permits} TO \"{role}\""),
    )
    .await;
    assert!(matches!(groups.try_acquire_group(request).await.unwrap(), GroupAcquire::Acquired { .. }));
    assert_eq!(groups.release_group(std::slice::from_ref(&k), &token).await.unwrap(), 1);

    // With DDL allowed, a table without a column the store needs is named, not upgraded.
    postgres_server::execute(&url, &format!("ALTER TABLE {} DROP COLUMN waiting", owner.table_name())).await;
    let err = owner.ensure_schema().await.unwrap_err();
    assert!(store_error_cause(&err, "ensure schema").contains("has no column waiting"), "{err}");

    store.pool().close().await;
    owner.pool().close().await;
    schema.drop().await;
    postgres_server::execute(&url, &format!("DROP OWNED BY \"{role}\"; DROP ROLE \"{role}\"")).await;
}

/// Upgrading onto a schema made by a version without lock groups, with `create=false`:
/// connecting, single locks and the purge work as before; group operations fail with the
/// typed error naming what is missing and the SQL that creates it; a store that may create
/// makes the group objects at its first group operation, after which both stores use them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_objects_are_checked_and_created_at_the_first_group_operation() {
    let Some(url) = kit::postgres_url("group_objects_are_checked_at_first_use") else { return };
    let schema = Schema::new(&url);
    let dba = PostgresLockStore::builder()
        .schema(&schema.name)
        .table("leases")
        .build(sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&url).await.unwrap())
        .unwrap();
    // What an older version created: the schema, the sequence and the lease table only.
    for ddl in &dba.statements().ddl()[..3] {
        postgres_server::execute(&url, ddl).await;
    }
    let layout = |create: bool| format!("schema={}&table=leases&create={create}", schema.name);
    let old = PostgresLockStore::connect(&with_params(&url, &layout(false))).await.expect("connects without groups");
    old.ensure_schema().await.expect("the lease table is all a create=false store checks");
    let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
    let (k, token) = (key("upgrade"), Token::generate());
    assert!(old.try_acquire(&k, &token, ttl).await.unwrap().is_acquired());
    assert!(old.release(&k, &token).await.unwrap());
    old.purge(MIN_PURGE_HORIZON).await.expect("the purge skips the missing group tables");

    let groups = old.groups().expect("groups");
    let members = [StoreMember::new(k.clone(), LockMode::Exclusive, Some(1))];
    let owner = OwnerId::new("test", "upgrade").unwrap();
    let request = GroupRequest::new(&members, &token, &owner, ttl, None, None);
    let err = groups.try_acquire_group(request).await.unwrap_err();
    let missing = group_schema_missing(&err);
    let qualified = |name: &str| format!("\"{}\".\"{name}\"", schema.name);
    assert_eq!(
        missing.missing(),
        [
            format!("table {} does not exist", qualified("leases_holders")),
            format!("table {} does not exist", qualified("leases_permits")),
            format!("function {} does not exist", qualified("leases_acquire_group")),
        ],
        "{err}"
    );
    let report = err.report().to_string();
    assert!(report.contains("create_schema is off") && report.contains("sql()"), "{report}");
    let sql = missing.sql();
    for object in ["leases_holders", "leases_permits", "leases_acquire_group"] {
        assert!(sql.contains(&qualified(object)), "{sql}");
    }
    // Every group operation says the same, none creates anything.
    let err = groups.holders(&k).await.unwrap_err();
    group_schema_missing(&err);
    let err = groups.wait_for_change(request, Duration::from_secs(5)).await.unwrap_err();
    group_schema_missing(&err);
    let err = groups.release_owner(&owner).await.unwrap_err();
    group_schema_missing(&err);

    // A store that may create makes them at its first group operation (connect alone
    // creates nothing).
    let new = PostgresLockStore::connect(&with_params(&url, &layout(true))).await.unwrap();
    let err = groups.try_acquire_group(request).await.unwrap_err();
    group_schema_missing(&err);
    let acquired = new.groups().expect("groups").try_acquire_group(request).await.unwrap();
    assert!(matches!(acquired, GroupAcquire::Acquired { .. }), "{acquired:?}");
    // The create=false store finds them now (a refusal is not remembered).
    assert_eq!(groups.release_group(std::slice::from_ref(&k), &token).await.unwrap(), 1);
    let other = Token::generate();
    let request = GroupRequest::new(&members, &other, &owner, ttl, None, None);
    assert!(matches!(groups.try_acquire_group(request).await.unwrap(), GroupAcquire::Acquired { .. }));
    assert_eq!(groups.release_owner(&owner).await.unwrap(), 1);

    old.pool().close().await;
    new.pool().close().await;
    dba.pool().close().await;
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durations_at_their_extremes_are_refused_or_saturated() {
    for timeout in [Duration::MAX, Duration::ZERO, Duration::from_secs(3601)] {
        let err = PostgresLockStore::builder()
            .acquire_timeout(timeout)
            .connect("postgres://u@192.0.2.1:9/db")
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains("acquire_timeout"), "{err}");
        let err = PostgresLockStore::builder()
            .connect_timeout(timeout)
            .connect("postgres://u@192.0.2.1:9/db")
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains("connect_timeout"), "{err}");
    }
    let options = PurgeOptions::new().every(Duration::MAX).older_than(Duration::MAX);
    assert!(options.get_every() <= Duration::from_secs(366 * 24 * 3600));
    let options = PurgeOptions::new().every(Duration::ZERO).older_than(Duration::ZERO);
    assert_eq!((options.get_every(), options.get_older_than()), (Duration::from_millis(1), MIN_PURGE_HORIZON));

    let Some(url) = kit::postgres_url("durations_at_their_extremes_are_refused_or_saturated") else { return };
    let schema = Schema::new(&url);
    let store = PostgresLockStore::builder()
        .schema(&schema.name)
        .acquire_timeout(Duration::from_secs(3600))
        .connect(&url)
        .await
        .unwrap();
    store.ensure_schema().await.unwrap();
    assert_eq!(store.purge(Duration::MAX).await.unwrap(), 0);
    assert_eq!(store.purge(Duration::ZERO).await.unwrap(), 0);
    for options in [
        PurgeOptions::new().every(Duration::MAX).older_than(Duration::MAX),
        PurgeOptions::new().every(Duration::ZERO).older_than(Duration::ZERO),
    ] {
        let purger = store.spawn_purger(options).unwrap();
        tokio::task::yield_now().await;
        purger.stop().await;
    }
    let k = key("max");
    store.wait_for_release(&k, Duration::MAX).await.expect("a free key: back at once");
    let token = Token::generate();
    assert!(store.try_acquire(&k, &token, Ttl::new(Duration::from_secs(30)).unwrap()).await.unwrap().is_acquired());
    let waited = tokio::time::timeout(Duration::from_millis(300), store.wait_for_release(&k, Duration::MAX)).await;
    assert!(waited.is_err(), "a held key: still waiting");
    store.pool().close().await;
    schema.drop().await;
}

/// In a fresh schema `ensure_schema` creates the lease table under the default name,
/// `distribute_lock`, and the store works at once; a `distribute_lock` table in another
/// layout (`key`, `value`, `expire_time`, as other libraries make it) is left as it is
/// and reported with the columns the store misses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_table_is_distribute_lock_and_a_foreign_layout_is_named() {
    let Some(url) = kit::postgres_url("the_default_table_is_distribute_lock") else { return };
    let fresh = Schema::new(&url);
    let store = PostgresLockStore::connect(&with_params(&url, &format!("schema={}", fresh.name))).await.unwrap();
    store.ensure_schema().await.unwrap();
    assert_eq!(store.table_name(), format!("\"{}\".\"distribute_lock\"", fresh.name));
    let (k, token, ttl) = (key("default-table"), Token::generate(), Ttl::new(Duration::from_secs(30)).unwrap());
    assert!(store.try_acquire(&k, &token, ttl).await.unwrap().is_acquired());
    assert!(store.release(&k, &token).await.unwrap());
    store.pool().close().await;
    fresh.drop().await;

    let foreign = Schema::new(&url);
    postgres_server::execute(&url, &format!("CREATE SCHEMA \"{}\"", foreign.name)).await;
    postgres_server::execute(
        &url,
        &format!(
            "CREATE TABLE \"{}\".distribute_lock (key TEXT NOT NULL CONSTRAINT distribute_lock_pk PRIMARY KEY, \
             value TEXT NOT NULL, expire_time TIMESTAMP WITHOUT TIME ZONE NOT NULL)",
            foreign.name
        ),
    )
    .await;
    let store = PostgresLockStore::connect(&with_params(&url, &format!("schema={}", foreign.name))).await.unwrap();
    let err = store.ensure_schema().await.unwrap_err();
    let cause = store_error_cause(&err, "ensure schema");
    assert!(cause.contains("distribute_lock\" has no column"), "{err}");
    for column in ["token", "fence", "expires_at"] {
        assert!(cause.contains(column), "{column} is not named: {err}");
    }
    store.pool().close().await;
    foreign.drop().await;
}

/// A layout made by a version without `placed_at` and with another grant function: a
/// store that may not create names the missing column and the statement that adds it; a
/// store that may adds the columns and replaces the function at its first group and
/// waiting operations, after which places report their age.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_without_placed_at_is_upgraded_by_a_store_that_creates() {
    let Some(url) = kit::postgres_url("a_layout_without_placed_at_is_upgraded") else { return };
    let schema = Schema::new(&url);
    let layout = |create: bool| format!("schema={}&table=leases&create={create}", schema.name);
    let qualified = |name: &str| format!("\"{}\".\"{name}\"", schema.name);
    let setup = PostgresLockStore::connect(&with_params(&url, &layout(true))).await.unwrap();
    setup.ensure_schema().await.unwrap();
    for ddl in setup.statements().queue_ddl() {
        postgres_server::execute(&url, ddl).await;
    }
    // What a version without `placed_at` made: the columns gone, another function body.
    for table in ["leases_holders", "leases_queue"] {
        postgres_server::execute(&url, &format!("ALTER TABLE {} DROP COLUMN placed_at", qualified(table))).await;
    }
    let function = setup.statements().ddl().last().unwrap().replacen("\nDECLARE", "\n-- another body\nDECLARE", 1);
    postgres_server::execute(&url, &function).await;
    setup.pool().close().await;

    let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
    let k = key("upgraded");
    let owner = OwnerId::new("test", "upgrade").unwrap();
    let (holder, waiter) = (Token::generate(), Token::generate());
    let members = [StoreMember::new(k.clone(), LockMode::Exclusive, Some(1))];
    let hold = GroupRequest::new(&members, &holder, &owner, ttl, None, None);
    let wait = GroupRequest::new(&members, &waiter, &owner, ttl, Some(ttl), None);

    let old = PostgresLockStore::connect(&with_params(&url, &layout(false))).await.unwrap();
    let err = old.groups().expect("groups").try_acquire_group(hold).await.unwrap_err();
    let missing = group_schema_missing(&err);
    let table = qualified("leases_holders");
    assert_eq!(missing.missing(), [format!("table {table} has no column placed_at")], "{err}");
    assert!(missing.sql().contains(&format!("ALTER TABLE {table} ADD COLUMN IF NOT EXISTS placed_at")), "{err}");

    let store = PostgresLockStore::connect(&with_params(&url, &layout(true))).await.unwrap();
    let groups = store.groups().expect("groups");
    assert!(matches!(groups.try_acquire_group(hold).await.unwrap(), GroupAcquire::Acquired { .. }));
    assert!(matches!(groups.try_acquire_group(wait).await.unwrap(), GroupAcquire::Blocked { .. }));
    let places = groups.places(&k).await.unwrap();
    assert!(matches!(places.as_slice(), [place] if place.token == waiter && place.waited.is_some()), "{places:?}");
    let body: String = sqlx::query_scalar(
        "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
         WHERE n.nspname = $1 AND p.proname = 'leases_acquire_group'",
    )
    .bind(&schema.name)
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert!(!body.contains("another body"), "the function is replaced");

    let single = key("upgraded-queue");
    let queue = store.queue().expect("a fair queue");
    assert!(store.try_acquire(&single, &holder, ttl).await.unwrap().is_acquired());
    let attempt = distlock_api::QueuedAttempt { key: &single, token: &waiter, ttl, place: ttl };
    assert!(!queue.try_acquire_queued(attempt).await.unwrap().is_acquired());
    let places = queue.queue_places(&single).await.unwrap();
    assert!(matches!(places.as_slice(), [place] if place.token == waiter && place.waited.is_some()), "{places:?}");

    old.pool().close().await;
    store.pool().close().await;
    schema.drop().await;
}
