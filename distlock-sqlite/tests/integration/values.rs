//! Values attached to leases, beyond the conformance cases: the values table's rows as
//! they stay in the file, a holder process that is gone, a file made before the values
//! table existed, and a new boot.

use std::path::PathBuf;
use std::time::Duration;

use distlock_api::{LeaseValue, LockKey, LockStore, StoreKey, Token, Ttl};
use distlock_sqlite::{sqlx, SqliteLockStore};

/// A database URL of its own for one test.
fn fresh_url(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("distlock-sqlite-values-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    let path: PathBuf = dir.join(format!("{name}-{}.db", Token::generate().short()));
    format!("sqlite://{}", path.display())
}

fn key(name: &str) -> StoreKey {
    LockKey::new(name).unwrap().to_store_key()
}

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).unwrap()
}

fn value(text: &str) -> LeaseValue {
    LeaseValue::new(text).unwrap()
}

/// The rows of the values table: `(key, token, value)`.
async fn rows(store: &SqliteLockStore) -> Vec<(String, String, String)> {
    sqlx::query_as("SELECT key, token, value FROM distlock_values ORDER BY key").fetch_all(store.pool()).await.unwrap()
}

/// A released lease's value stays in its row, but is never reported with a later lease of
/// the key, not even one of the same token (the row names the lease's fence); the key's
/// next value overwrites the row, so a key keeps one row however many holders it had.
#[tokio::test]
async fn a_value_left_by_an_earlier_lease_is_never_reported() {
    let store = SqliteLockStore::connect(&fresh_url("stale")).await.unwrap();
    let values = store.values().expect("the SQLite store has values");
    let key = key("leader");
    let first = Token::generate();
    assert!(store.try_acquire(&key, &first, ttl()).await.unwrap().is_acquired());
    assert!(values.set_value(&key, &first, &value("first")).await.unwrap());
    assert!(store.release(&key, &first).await.unwrap());
    assert_eq!(rows(&store).await, [(key.as_str().to_owned(), first.as_str().to_owned(), "first".to_owned())]);

    assert!(store.try_acquire(&key, &first, ttl()).await.unwrap().is_acquired(), "the same token again");
    let seen = values.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!((seen.holder.token, seen.value), (first.clone(), None), "the earlier lease's value was reported");
    assert!(store.release(&key, &first).await.unwrap());

    let second = Token::generate();
    assert!(store.try_acquire(&key, &second, ttl()).await.unwrap().is_acquired());
    assert_eq!(values.inspect_value(&key).await.unwrap().expect("held").value, None);
    assert!(values.set_value(&key, &second, &value("second")).await.unwrap());
    assert!(values.set_value(&key, &second, &value("second")).await.unwrap(), "the same value again is written");
    assert_eq!(rows(&store).await, [(key.as_str().to_owned(), second.as_str().to_owned(), "second".to_owned())]);
    assert!(store.release(&key, &second).await.unwrap());
}

/// A lease whose holder process is gone counts as free for `inspect_value` as for
/// `inspect`: no holder, no value.
#[tokio::test]
async fn a_holder_process_that_is_gone_has_no_value() {
    let store = SqliteLockStore::connect(&fresh_url("gone")).await.unwrap();
    let values = store.values().unwrap();
    let key = key("leader");
    let token = Token::generate();
    assert!(store.try_acquire(&key, &token, ttl()).await.unwrap().is_acquired());
    assert!(values.set_value(&key, &token, &value("10.0.0.7:8080")).await.unwrap());
    // The holder's id is this process's, its start time another: a process that reused the id.
    sqlx::query("UPDATE distlock SET pid_start = pid_start + 1").execute(store.pool()).await.unwrap();
    assert_eq!(store.inspect(&key).await.unwrap(), None);
    assert_eq!(values.inspect_value(&key).await.unwrap(), None, "a gone holder's value was reported");
}

/// A file made before the values table existed: the next store to open it adds the table,
/// and a lease taken before works with values at once.
#[tokio::test]
async fn values_work_in_a_file_made_without_them() {
    let url = fresh_url("older");
    let older = SqliteLockStore::connect(&url).await.unwrap();
    let key = key("leader");
    let token = Token::generate();
    assert!(older.try_acquire(&key, &token, ttl()).await.unwrap().is_acquired());
    sqlx::query("DROP TABLE distlock_values").execute(older.pool()).await.unwrap();

    let store = SqliteLockStore::connect(&url).await.unwrap();
    let values = store.values().unwrap();
    assert!(values.set_value(&key, &token, &value("10.0.0.7:8080")).await.unwrap());
    let seen = values.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!((seen.holder.token, seen.value), (token.clone(), Some(value("10.0.0.7:8080"))));
    assert!(store.release(&key, &token).await.unwrap());
}

/// The first store of a new boot removes every lease of the boots before, and with them
/// their values.
#[tokio::test]
async fn a_new_boot_removes_the_values_of_earlier_boots() {
    let url = fresh_url("boot");
    let store = SqliteLockStore::connect(&url).await.unwrap();
    let values = store.values().unwrap();
    let (held, released) = (key("held"), key("released"));
    for key in [&held, &released] {
        let token = Token::generate();
        assert!(store.try_acquire(key, &token, ttl()).await.unwrap().is_acquired());
        assert!(values.set_value(key, &token, &value("v")).await.unwrap());
        if key == &released {
            assert!(store.release(key, &token).await.unwrap());
        }
    }
    assert_eq!(rows(&store).await.len(), 2, "a released lease's value stays");
    // As if the file had last been opened before a reboot.
    let other = "00000000-0000-4000-8000-000000000000";
    for statement in ["UPDATE distlock SET boot = ?1", "UPDATE distlock_boots SET boot = ?1"] {
        sqlx::query(statement).bind(other).execute(store.pool()).await.unwrap();
    }
    let store = SqliteLockStore::connect(&url).await.unwrap();
    assert_eq!(store.values().unwrap().inspect_value(&held).await.unwrap(), None);
    assert_eq!(rows(&store).await, [], "values of an earlier boot are removed");
}
