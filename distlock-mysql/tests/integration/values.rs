//! Values attached to leases, beyond the conformance cases: the values table's rows as
//! they stay on the server, and a lease table made before the values table existed.

use std::time::Duration;

use distlock_api::{LeaseValue, LockError, LockKey, LockStore, StoreKey, Token, Ttl};
use distlock_conformance::kit;
use distlock_mysql::{sqlx, MysqlLockStore};

fn key(case: &str) -> StoreKey {
    LockKey::new(format!("values:{}:{case}", Token::generate().short())).unwrap().to_store_key()
}

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(30)).unwrap()
}

fn value(text: &str) -> LeaseValue {
    LeaseValue::new(text).unwrap()
}

/// The rows of the values table for `key`: `(token, value)`.
async fn rows(store: &MysqlLockStore, table: &str, key: &StoreKey) -> Vec<(String, String)> {
    let statement = format!("SELECT token, value FROM `{table}_values` WHERE lock_key = ?");
    let rows: Vec<(Vec<u8>, Vec<u8>)> =
        sqlx::query_as(&statement).bind(key.as_str()).fetch_all(store.pool()).await.unwrap();
    rows.into_iter()
        .map(|(token, value)| (String::from_utf8(token).unwrap(), String::from_utf8(value).unwrap()))
        .collect()
}

/// A released lease's value stays in its row, but is never reported with a later lease of
/// the key, not even one of the same token (the row names the lease's fence); the key's
/// next value overwrites the row, so a key keeps one row however many holders it had.
#[tokio::test]
async fn a_value_left_by_an_earlier_lease_is_never_reported() {
    let Some(url) = kit::mysql_url("mysql values") else { return };
    let store = MysqlLockStore::connect(&url).await.unwrap();
    // `connect` creates nothing: the test makes the tables it uses, whatever ran before.
    store.ensure_schema().await.unwrap();
    let values = store.values().expect("the MySQL store has values");
    let key = key("stale");
    let first = Token::generate();
    assert!(store.try_acquire(&key, &first, ttl()).await.unwrap().is_acquired());
    assert!(values.set_value(&key, &first, &value("first")).await.unwrap());
    assert!(store.release(&key, &first).await.unwrap());
    assert_eq!(rows(&store, "distribute_lock", &key).await, [(first.as_str().to_owned(), "first".to_owned())]);

    assert!(store.try_acquire(&key, &first, ttl()).await.unwrap().is_acquired(), "the same token again");
    let seen = values.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!((seen.holder.token, seen.value), (first.clone(), None), "the earlier lease's value was reported");
    assert!(store.release(&key, &first).await.unwrap());

    let second = Token::generate();
    assert!(store.try_acquire(&key, &second, ttl()).await.unwrap().is_acquired());
    assert_eq!(values.inspect_value(&key).await.unwrap().expect("held").value, None);
    assert!(values.set_value(&key, &second, &value("second")).await.unwrap());
    assert!(values.set_value(&key, &second, &value("second")).await.unwrap(), "the same value again is written");
    assert_eq!(rows(&store, "distribute_lock", &key).await, [(second.as_str().to_owned(), "second".to_owned())]);
    assert!(store.release(&key, &second).await.unwrap());
}

/// A lease table of a deployment that predates values: `ensure_schema` adds the values
/// table beside it, and a lease taken before works with values at once. Until then,
/// `set_value` fails with the server's message naming the missing table.
#[tokio::test]
async fn values_work_beside_a_lease_table_made_without_them() {
    let Some(url) = kit::mysql_url("mysql values beside an older table") else { return };
    let table = format!("older_{}", Token::generate().short().replace('-', ""));
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{separator}table={table}");
    // `connect` creates nothing: the tables of an earlier version, all but the values table.
    let store = MysqlLockStore::connect(&url).await.unwrap();
    let values_table = format!("`{table}_values`");
    for ddl in store.ddl().into_iter().filter(|ddl| !ddl.contains(&values_table)) {
        sqlx::query(ddl).execute(store.pool()).await.unwrap();
    }
    let key = key("older");
    let token = Token::generate();
    assert!(store.try_acquire(&key, &token, ttl()).await.unwrap().is_acquired());
    let values = store.values().unwrap();
    let err = values.set_value(&key, &token, &value("x")).await.unwrap_err();
    assert!(matches!(err, LockError::Store { operation: "set_value", .. }), "{err}");
    let cause = err.cause().map(ToString::to_string).unwrap_or_default();
    assert!(cause.contains(&format!("{table}_values")), "{err}: {cause}");

    store.ensure_schema().await.unwrap();
    assert!(values.set_value(&key, &token, &value("10.0.0.7:8080")).await.unwrap());
    let seen = values.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!(seen.value.as_ref().map(LeaseValue::as_str), Some("10.0.0.7:8080"));
    assert!(store.release(&key, &token).await.unwrap());
    let suffixes = ["", "_waiters", "_queue", "_names", "_holders", "_places", "_permits", "_values"];
    assert_eq!(suffixes.len(), store.ddl().len(), "every table is dropped");
    let drop = suffixes.iter().map(|suffix| format!("`{table}{suffix}`")).collect::<Vec<_>>().join(", ");
    sqlx::raw_sql(&format!("DROP TABLE {drop}")).execute(store.pool()).await.unwrap();
}
