use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, InvalidKey, InvalidOptions, LockError, LockManager, LockOptions, Ttl};

use super::{Keys, LONG_TTL, RETRY};

type KeyCheck = fn(&InvalidKey) -> bool;
type OptionsCheck = fn(&InvalidOptions) -> bool;
use crate::counting::CountingStore;

/// Every bad input gets its typed error, and the store is never called.
pub async fn bad_input_is_rejected_before_any_store_call(store: Arc<DynLockStore>) {
    let keys = Keys::new("input");
    let counting = CountingStore::new(store);
    let locks = LockManager::new(counting.clone());
    let good = keys.key("a");
    let too_long = "k".repeat(513);

    let bad_keys: [(&str, KeyCheck); 5] = [
        ("", |r| matches!(r, InvalidKey::Empty)),
        (&too_long, |r| matches!(r, InvalidKey::TooLong { len: 513, max: 512 })),
        ("nul\0byte", |r| matches!(r, InvalidKey::ControlCharacter { index: 3 })),
        ("new\nline", |r| matches!(r, InvalidKey::ControlCharacter { index: 3 })),
        ("\u{1b}[31mred", |r| matches!(r, InvalidKey::ControlCharacter { index: 0 })),
    ];
    for (key, expected) in bad_keys {
        for err in [
            locks.try_lock(key, LONG_TTL).await.unwrap_err(),
            locks
                .lock_opts(key, LONG_TTL, &LockOptions::new().wait(Duration::from_secs(1)).retry_interval(RETRY))
                .await
                .unwrap_err(),
            locks.with_lock(key, LONG_TTL, || async { Ok::<_, LockError>(()) }).await.unwrap_err(),
        ] {
            assert!(matches!(&err, LockError::InvalidKey { reason } if expected(reason)), "{key:?}: {err}");
        }
    }

    let bad_options: [(Duration, LockOptions, OptionsCheck); 8] = [
        (Duration::ZERO, LockOptions::new(), |r| matches!(r, InvalidOptions::ZeroTtl)),
        (Duration::MAX, LockOptions::new(), |r| matches!(r, InvalidOptions::TtlTooLong { .. })),
        (Ttl::MAX + Duration::from_millis(1), LockOptions::new(), |r| matches!(r, InvalidOptions::TtlTooLong { .. })),
        (LONG_TTL, LockOptions::new().wait(Duration::MAX), |r| matches!(r, InvalidOptions::WaitTooLong { .. })),
        (LONG_TTL, LockOptions::new().wait(Duration::from_secs(1)).retry_interval(Duration::ZERO), |r| {
            matches!(r, InvalidOptions::ZeroRetryInterval)
        }),
        (LONG_TTL, LockOptions::new().retry_interval(Duration::MAX), |r| {
            matches!(r, InvalidOptions::RetryIntervalTooLong { .. })
        }),
        (LONG_TTL, LockOptions::new().loss_margin(LONG_TTL), |r| matches!(r, InvalidOptions::LossMargin { .. })),
        (LONG_TTL, LockOptions::new().renew_every(Duration::MAX), |r| {
            matches!(r, InvalidOptions::RenewInterval { .. })
        }),
    ];
    for (ttl, options, expected) in bad_options {
        for err in [
            locks.try_lock_opts(&good, ttl, &options).await.unwrap_err(),
            locks.lock_opts(&good, ttl, &options).await.unwrap_err(),
            locks.with_lock_opts(&good, ttl, &options, || async { Ok::<_, LockError>(()) }).await.unwrap_err(),
        ] {
            assert!(
                matches!(&err, LockError::InvalidOptions { reason } if expected(reason)),
                "{ttl:?} {options:?}: {err}"
            );
        }
    }
    for ttl in [Duration::ZERO, Duration::MAX] {
        let err = locks.try_lock(&good, ttl).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidOptions { .. }), "{err}");
        let err = locks.lock(&good, ttl).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidOptions { .. }), "{err}");
    }
    assert_eq!(counting.total(), 0, "bad input reached the store");

    // A sub-millisecond TTL is not an error: it rounds up to 1 ms.
    assert_eq!(Ttl::new(Duration::from_nanos(1)).unwrap().as_millis(), 1);

    let held = locks.lock(&good, LONG_TTL).await.unwrap();
    let calls = counting.total();
    for ttl in [Duration::ZERO, Duration::MAX] {
        let err = held.extend(ttl).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidOptions { .. }), "{err}");
    }
    assert_eq!(counting.total(), calls, "a bad extend reached the store");
    assert!(held.release().await.unwrap());
}
