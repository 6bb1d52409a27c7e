use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LeaseValue, LeaseValueStore, LockError, LockManager, Token, Ttl};

use super::{Keys, LONG_TTL};

fn ttl(duration: Duration) -> Ttl {
    Ttl::new(duration).expect("test TTLs are valid")
}

fn value(text: &str) -> LeaseValue {
    LeaseValue::new(text).expect("test values are valid")
}

/// The store's lease values, or — on a store without them — a check that leader election
/// refuses it with `Unsupported` before any I/O, and `None`.
async fn values_or_refusal(store: &Arc<DynLockStore>, case: &str) -> Option<()> {
    if store.values().is_some() {
        return Some(());
    }
    let locks = LockManager::new(store.clone());
    let keys = Keys::new(case);
    let err = distlock_election::Election::new(&locks, &keys.key("e")).unwrap().leader().await.unwrap_err();
    assert!(matches!(err, LockError::Unsupported { operation: "election", .. }), "{err}");
    None
}

/// A value belongs to the lease that set it: only its holder sets it, a renewal keeps it,
/// a foreign token changes nothing, and after a release the key's next holder starts with
/// none. Empty and maximal values (multi-byte text) round-trip.
pub async fn lease_value_belongs_to_its_lease(store: Arc<DynLockStore>) {
    if values_or_refusal(&store, "value").await.is_none() {
        return;
    }
    let values: &dyn LeaseValueStore = store.values().expect("checked above");
    let keys = Keys::new("value");
    let key = keys.store_key("a");
    assert!(values.inspect_value(&key).await.unwrap().is_none(), "a free key has a holder");
    let stranger = Token::generate();
    assert!(!values.set_value(&key, &stranger, &value("x")).await.unwrap(), "a value was set on a free key");

    let first = Token::generate();
    assert!(store.try_acquire(&key, &first, ttl(LONG_TTL)).await.unwrap().is_acquired());
    let info = store.inspect(&key).await.unwrap().expect("held");
    let seen = values.inspect_value(&key).await.unwrap().expect("a held key has a holder");
    assert_eq!(seen.holder.token, first);
    assert_eq!(seen.holder.fence, info.fence);
    assert!(seen.holder.ttl_left <= LONG_TTL && seen.holder.ttl_left > LONG_TTL - Duration::from_secs(10));
    assert_eq!(seen.value, None, "a new lease has a value");

    assert!(values.set_value(&key, &first, &value("10.0.0.7:8080")).await.unwrap());
    let seen = values.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!(seen.value.as_ref().map(LeaseValue::as_str), Some("10.0.0.7:8080"));
    assert!(values.set_value(&key, &first, &value("10.0.0.8:8080")).await.unwrap());
    assert!(!values.set_value(&key, &stranger, &value("intruder")).await.unwrap(), "a foreign token set a value");
    assert!(store.extend(&key, &first, ttl(LONG_TTL)).await.unwrap());
    let seen = values.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!(seen.holder.token, first);
    assert_eq!(seen.value.as_ref().map(LeaseValue::as_str), Some("10.0.0.8:8080"), "replaced, kept by extend");

    for text in [String::new(), "é".repeat(LeaseValue::MAX_LEN / 2), "line\nbreak 'quote' \"double\" \\".to_owned()] {
        assert!(values.set_value(&key, &first, &value(&text)).await.unwrap());
        let seen = values.inspect_value(&key).await.unwrap().expect("held");
        assert_eq!(seen.value.as_ref().map(LeaseValue::as_str), Some(text.as_str()));
    }

    assert!(store.release(&key, &first).await.unwrap());
    assert!(values.inspect_value(&key).await.unwrap().is_none(), "a released key has a holder");
    assert!(!values.set_value(&key, &first, &value("late")).await.unwrap(), "a value was set after release");
    let second = Token::generate();
    assert!(store.try_acquire(&key, &second, ttl(LONG_TTL)).await.unwrap().is_acquired());
    let seen = values.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!(seen.holder.token, second);
    assert_eq!(seen.value, None, "the next holder inherited the released lease's value");
    assert!(store.release(&key, &second).await.unwrap());

    // Another key's value is another key's.
    let other = keys.store_key("b");
    let third = Token::generate();
    assert!(store.try_acquire(&other, &third, ttl(LONG_TTL)).await.unwrap().is_acquired());
    assert!(values.set_value(&other, &third, &value("b")).await.unwrap());
    assert!(!values.set_value(&key, &third, &value("b")).await.unwrap());
    assert!(store.release(&other, &third).await.unwrap());
}

/// An expired lease takes its value with it: the key's next holder has none, and the old
/// token can no longer set one.
pub async fn lease_value_ends_with_an_expired_lease(store: Arc<DynLockStore>) {
    if values_or_refusal(&store, "value-expiry").await.is_none() {
        return;
    }
    let values: &dyn LeaseValueStore = store.values().expect("checked above");
    let keys = Keys::new("value-expiry");
    let key = keys.store_key("a");
    let first = Token::generate();
    assert!(store.try_acquire(&key, &first, ttl(Duration::from_millis(400))).await.unwrap().is_acquired());
    assert!(values.set_value(&key, &first, &value("first")).await.unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while values.inspect_value(&key).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the lease never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!values.set_value(&key, &first, &value("late")).await.unwrap(), "an expired lease took a value");
    let second = Token::generate();
    assert!(store.try_acquire(&key, &second, ttl(LONG_TTL)).await.unwrap().is_acquired());
    let seen = values.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!(seen.holder.token, second);
    assert_eq!(seen.value, None, "the next holder inherited the expired lease's value");
    assert!(store.release(&key, &second).await.unwrap());
}
