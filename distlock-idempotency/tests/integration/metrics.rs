//! The `metrics` feature: `distlock_idempotency_conflict_total{backend, reason}` and the
//! other counters, checked with `metrics-util`'s debugging recorder for this thread only.
#![cfg(feature = "metrics")]

use std::sync::Arc;

use distlock_idempotency::metric_names::{CLAIM_TOTAL, COMPLETION_TOTAL, CONFLICT_TOTAL, REPLAY_TOTAL};
use distlock_idempotency::{Claim, Fingerprint, Idempotency, IdempotencyKey, StoredResponse};
use distlock_memory::MemoryIdempotencyStore;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;

fn counter(
    snapshot: &[(metrics_util::CompositeKey, Option<metrics::Unit>, Option<metrics::SharedString>, DebugValue)],
    name: &str,
    want: &[(&str, &str)],
) -> u64 {
    snapshot
        .iter()
        .filter(|(key, ..)| key.kind() == MetricKind::Counter && key.key().name() == name)
        .filter(|(key, ..)| {
            let mut labels: Vec<_> = key.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
            labels.sort();
            let mut want: Vec<_> = want.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            want.sort();
            labels == want
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => *n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

#[test]
fn conflicts_replays_and_completions_are_counted_without_keys() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let idem = Idempotency::new(Arc::new(MemoryIdempotencyStore::new()));
            let key = IdempotencyKey::new("secret-key").unwrap();
            let (a, b) = (Fingerprint::of_parts(&[b"a"]), Fingerprint::of_parts(&[b"b"]));
            let Claim::Started(claim) = idem.claim(&key, a).await.unwrap() else { panic!("not started") };
            assert!(matches!(idem.claim(&key, a).await.unwrap(), Claim::InProgress { .. }));
            assert!(matches!(idem.claim(&key, b).await.unwrap(), Claim::Mismatch { .. }));
            assert!(claim.complete(&StoredResponse::new(200, "x")).await.unwrap());
            assert!(matches!(idem.claim(&key, a).await.unwrap(), Claim::Replay(_)));
        });
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let memory = ("backend", "memory");
    assert_eq!(counter(&snapshot, CONFLICT_TOTAL, &[memory, ("reason", "in_progress")]), 1);
    assert_eq!(counter(&snapshot, CONFLICT_TOTAL, &[memory, ("reason", "mismatch")]), 1);
    assert_eq!(counter(&snapshot, REPLAY_TOTAL, &[memory]), 1);
    assert_eq!(counter(&snapshot, CLAIM_TOTAL, &[memory, ("outcome", "started")]), 1);
    assert_eq!(counter(&snapshot, COMPLETION_TOTAL, &[memory, ("outcome", "stored")]), 1);
    for (key, ..) in &snapshot {
        assert!(key.key().labels().all(|l| !l.value().contains("secret")), "{key:?}");
    }
}
