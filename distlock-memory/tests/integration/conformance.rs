//! The whole conformance suite against the in-memory store.

use std::sync::Arc;

use distlock_api::DynLockStore;
use distlock_memory::MemoryLockStore;

async fn store() -> Option<Arc<DynLockStore>> {
    Some(Arc::new(MemoryLockStore::new()))
}

distlock_conformance::conformance_suite!(store);
