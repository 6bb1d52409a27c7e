//! When a claim's renewal task runs: only for claims still running half a renewal
//! interval after they were taken.

use std::sync::Arc;
use std::time::Duration;

use distlock_idempotency::{
    Claim, ClaimHandle, DynIdempotencyStore, Fingerprint, Idempotency, IdempotencyKey, IdempotencyOptions,
    StoredResponse,
};
use distlock_memory::MemoryIdempotencyStore;

fn tasks_alive() -> usize {
    tokio::runtime::Handle::current().metrics().num_alive_tasks()
}

async fn claim(idem: &Idempotency, key: &str) -> ClaimHandle {
    let key = IdempotencyKey::new(key).expect("key");
    match idem.claim(&key, Fingerprint::of_parts(&[b"request"])).await.expect("claim") {
        Claim::Started(claim) => claim,
        other => panic!("claim of a fresh key: {other:?}"),
    }
}

/// Claims completed at once never start a renewal task (the memory store answers
/// without yielding, so a task started and aborted would still be alive here); a claim
/// that runs on well past its lease is renewed, and its task ends with it.
#[tokio::test(start_paused = true)]
async fn only_a_claim_that_runs_on_starts_a_renewal_task() {
    let store: Arc<DynIdempotencyStore> = Arc::new(MemoryIdempotencyStore::new());
    let lease = Duration::from_secs(3);
    let idem = Idempotency::with_options(store, IdempotencyOptions::new().lease(lease)).expect("options");
    let response = StoredResponse::new(200, "done");
    for n in 0..50 {
        let quick = claim(&idem, &format!("quick:{n}")).await;
        assert!(quick.complete(&response).await.expect("complete"));
    }
    assert!(tasks_alive() <= 1, "{} tasks alive after 50 completed claims; at most the ticker", tasks_alive());

    let slow = claim(&idem, "slow").await;
    tokio::time::sleep(lease * 4).await;
    assert!(!slow.is_lost(), "a renewed claim outlives its lease");
    assert_eq!(tasks_alive(), 1, "the slow claim's renewal task alone (the ticker ended with nothing listed)");
    assert!(slow.complete(&response).await.expect("complete"));
    tokio::task::yield_now().await;
    assert_eq!(tasks_alive(), 0, "the renewal task ends with its claim");
}
