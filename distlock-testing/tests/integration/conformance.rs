//! The whole conformance suite through a `FaultyStore` without faults over the memory
//! store: the wrapper forwards every ability the suite uses — lock groups, the fair
//! queue, listing, release notifications — unchanged.

use std::sync::Arc;

use distlock_api::DynLockStore;
use distlock_memory::MemoryLockStore;
use distlock_testing::FaultyStore;

async fn store() -> Option<Arc<DynLockStore>> {
    Some(Arc::new(FaultyStore::new(MemoryLockStore::new())))
}

distlock_conformance::conformance_suite!(store);
