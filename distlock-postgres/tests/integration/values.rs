//! Values attached to leases on PostgreSQL: the table beside the lease table, values of
//! earlier leases never reported (same token after an expiry, a stale row, a late write),
//! the table missing for a store that may not create it, and the purge.

use crate::common;

use std::time::Duration;

use common::{key, TestTable};
use distlock_api::{LeaseValue, LeaseValueStore, LockError, LockStore, StoreKey, Token, Ttl};
use distlock_conformance::kit::{self, postgres_server};
use distlock_postgres::{sqlx, PostgresLockStore, MIN_PURGE_HORIZON};

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

fn value(text: &str) -> LeaseValue {
    LeaseValue::new(text).unwrap()
}

fn values(store: &PostgresLockStore) -> &dyn LeaseValueStore {
    store.values().expect("the PostgreSQL store has lease values")
}

async fn fence(store: &PostgresLockStore, key: &StoreKey, token: &Token) -> u64 {
    assert!(store.try_acquire(key, token, ttl(60_000)).await.unwrap().is_acquired());
    store.inspect(key).await.unwrap().expect("held").fence.expect("fenced")
}

async fn seen(store: &PostgresLockStore, key: &StoreKey) -> Option<String> {
    let holder = values(store).inspect_value(key).await.unwrap().expect("held");
    holder.value.map(LeaseValue::into_string)
}

/// A value row that names another lease of the key — the same token after its lease
/// expired (a new fence), a row written by hand for the holder's token with an old fence —
/// is never reported, and a write that read an ended lease never replaces the value of a
/// later lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_of_another_lease_of_the_key_is_never_reported() {
    let Some(t) = TestTable::new("a_value_of_another_lease_of_the_key_is_never_reported").await else { return };
    let (store, k, token) = (&t.store, key("leader"), Token::generate());
    let first = fence(store, &k, &token).await;
    assert!(values(store).set_value(&k, &token, &value("first")).await.unwrap());
    assert_eq!(seen(store, &k).await.as_deref(), Some("first"));

    // The same token takes the key again after its lease expired: a new lease, no value.
    t.age(&k, "1 second").await;
    let second = fence(store, &k, &token).await;
    assert!(second > first);
    assert_eq!(seen(store, &k).await, None, "the expired lease's value came back");
    let table = t.derived("values");
    let row: (String, i64, String) = sqlx::query_as(&format!("SELECT token, fence, value FROM {table} WHERE key = $1"))
        .bind(k.as_str())
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(row, (token.as_str().to_owned(), i64::try_from(first).unwrap(), "first".to_owned()), "it stays");

    // The row of a later lease (a larger fence) is not overwritten by the holder of an
    // earlier one, as a write that read its lease before it ended would try.
    let later = i64::try_from(second).unwrap() + 1_000;
    let done = sqlx::query(&format!("UPDATE {table} SET fence = $2, value = 'later' WHERE key = $1"))
        .bind(k.as_str())
        .bind(later)
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
    assert!(!values(store).set_value(&k, &token, &value("second")).await.unwrap(), "wrote over a later lease");
    assert_eq!(seen(store, &k).await, None, "a row of another fence was reported");

    // Once the row names an earlier lease again, the holder writes over it; a release
    // ends what is seen.
    sqlx::query(&format!("UPDATE {table} SET fence = $2 WHERE key = $1"))
        .bind(k.as_str())
        .bind(i64::try_from(first).unwrap())
        .execute(store.pool())
        .await
        .unwrap();
    assert!(values(store).set_value(&k, &token, &value("second")).await.unwrap());
    assert_eq!(seen(store, &k).await.as_deref(), Some("second"));
    assert!(store.release(&k, &token).await.unwrap());
    assert!(values(store).inspect_value(&k).await.unwrap().is_none());
    t.drop().await;
}

/// The table of values is created on first use by a store that creates its schema; a
/// store with `create=false` answers every value operation with a `LockError::Store`
/// naming the table and `Statements::values_ddl`, not remembered once the table exists,
/// while single locks and the purge keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_values_table_is_made_on_first_use_or_named_when_it_may_not_be() {
    let Some(url) = kit::postgres_url("the_values_table_is_made_on_first_use") else { return };
    let schema = postgres_server::random_identifier("dl_values");
    let layout = |create: bool| {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}schema={schema}&table=leases&create={create}")
    };
    let creating = PostgresLockStore::connect(&layout(true)).await.unwrap();
    creating.ensure_schema().await.unwrap();
    let table = format!("\"{schema}\".\"leases_values\"");
    let exists = || async {
        sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL")
            .bind(&table)
            .fetch_one(creating.pool())
            .await
            .unwrap()
    };
    assert!(!exists().await, "ensure_schema leaves the values table to its first use");

    let fixed = PostgresLockStore::connect(&layout(false)).await.unwrap();
    let (k, token) = (key("fixed"), Token::generate());
    fence(&fixed, &k, &token).await;
    for err in [
        values(&fixed).set_value(&k, &token, &value("v")).await.unwrap_err(),
        values(&fixed).inspect_value(&k).await.unwrap_err(),
    ] {
        let LockError::Store { backend: "postgres", operation, key: Some(app_key), .. } = &err else {
            panic!("{err:?}")
        };
        assert!(["set_value", "inspect_value"].contains(operation), "{err}");
        assert_eq!(Some(app_key.as_str()), k.as_str().strip_prefix("lock:"));
        let cause = err.cause().expect("a cause").to_string();
        assert!(cause.contains(&format!("table {table} of lease values does not exist")), "{cause}");
        assert!(cause.contains("Statements::values_ddl"), "says what to do: {cause}");
    }
    assert!(!exists().await, "a create=false store created it");
    fixed.purge(MIN_PURGE_HORIZON).await.expect("the purge skips the missing table");
    assert!(!exists().await, "the purge created it");

    // A store that may create makes it at its first value operation; the other store
    // finds it then.
    assert!(values(&creating).inspect_value(&k).await.unwrap().is_some());
    assert!(exists().await);
    assert!(values(&fixed).set_value(&k, &token, &value("v")).await.unwrap());
    assert_eq!(seen(&creating, &k).await.as_deref(), Some("v"));
    assert_eq!(creating.statements().values_ddl().len(), 1);
    assert!(creating.statements().values_ddl()[0].contains(&table));
    assert!(fixed.release(&k, &token).await.unwrap());

    fixed.pool().close().await;
    creating.pool().close().await;
    postgres_server::execute(&url, &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")).await;
}

/// The purge deletes the values written long ago of leases that ended, never a value of
/// a live lease (however old) or one written within the horizon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_deletes_old_values_of_ended_leases_only() {
    let Some(t) = TestTable::new("the_purge_deletes_old_values_of_ended_leases_only").await else { return };
    let store = &t.store;
    let table = t.derived("values");
    let (released, held, recent) = (key("released"), key("held"), key("recent"));
    let holder = Token::generate();
    for k in [&released, &held, &recent] {
        let token = if k == &held { holder.clone() } else { Token::generate() };
        fence(store, k, &token).await;
        assert!(values(store).set_value(k, &token, &value("v")).await.unwrap());
        if k != &held {
            assert!(store.release(k, &token).await.unwrap());
        }
    }
    let age = format!("UPDATE {table} SET written_at = clock_timestamp() - interval '2 hours' WHERE key = ANY($1)");
    sqlx::query(&age).bind([released.as_str(), held.as_str()]).execute(store.pool()).await.unwrap();
    let count = format!("SELECT count(*) FROM {table}");
    let rows = || async { sqlx::query_scalar::<_, i64>(&count).fetch_one(store.pool()).await.unwrap() };
    assert_eq!(rows().await, 3);

    assert_eq!(store.purge(Duration::from_secs(3600)).await.unwrap(), 1, "the old value of the released lease");
    assert_eq!(rows().await, 2);
    assert_eq!(seen(store, &held).await.as_deref(), Some("v"), "a live lease's value is kept");
    assert_eq!(store.purge(Duration::ZERO).await.unwrap(), 0, "the recent value is kept");
    t.drop().await;
}
