//! The idempotency suite on the memory store, and what only paused time can show.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::idempotency::{DynIdempotencyStore, Fingerprint, IdempotencyKey, StoredResponse};
use distlock_idempotency::{Claim, Idempotency, IdempotencyOptions};
use distlock_memory::MemoryIdempotencyStore;

async fn store() -> Option<Arc<DynIdempotencyStore>> {
    Some(Arc::new(MemoryIdempotencyStore::new()))
}

distlock_conformance::idempotency_suite!(store);

/// The default 24 h retention, in paused time: replayed just before, run again after.
#[tokio::test(start_paused = true)]
async fn default_retention_is_24_hours() {
    let idem = Idempotency::new(Arc::new(MemoryIdempotencyStore::new()));
    let key = IdempotencyKey::new("k").unwrap();
    let fp = Fingerprint::of_parts(&[b"a"]);
    let Claim::Started(claim) = idem.claim(&key, fp).await.unwrap() else { panic!("not started") };
    assert!(claim.complete(&StoredResponse::new(200, "x")).await.unwrap());
    tokio::time::advance(Duration::from_secs(24 * 3600 - 1)).await;
    assert!(matches!(idem.claim(&key, fp).await.unwrap(), Claim::Replay(_)));
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(matches!(idem.claim(&key, fp).await.unwrap(), Claim::Started(_)));
}

/// Expired records are swept: the store does not grow with keys whose results expired.
#[tokio::test(start_paused = true)]
async fn expired_records_are_swept() {
    let store = MemoryIdempotencyStore::new();
    let idem =
        Idempotency::with_options(Arc::new(store.clone()), IdempotencyOptions::new().retention(Duration::from_secs(1)))
            .unwrap();
    let fp = Fingerprint::of_parts(&[b"a"]);
    for round in 0..20 {
        for i in 0..500 {
            let key = IdempotencyKey::new(format!("{round}:{i}")).unwrap();
            let Claim::Started(claim) = idem.claim(&key, fp).await.unwrap() else { panic!("not started") };
            assert!(claim.complete(&StoredResponse::new(200, "x")).await.unwrap());
        }
        tokio::time::advance(Duration::from_secs(2)).await;
    }
    assert!(store.len() < 2_500, "{} records for 500 live", store.len());
}
