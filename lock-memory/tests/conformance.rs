//! The whole conformance suite against the in-memory store.

use std::sync::Arc;

use distlock_api::DynLockStore;
use distlock_memory::MemoryLockStore;

async fn store() -> Option<Arc<DynLockStore>> {
    Some(Arc::new(MemoryLockStore::new()))
}

distlock_conformance::conformance_suite!(store);

/// Notified hand-off (joins the shared suite once every store has release notifications).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_wakes_on_release_not_by_polling() {
    distlock_conformance::cases::waiter_wakes_on_release_not_by_polling(store().await.unwrap()).await;
}
