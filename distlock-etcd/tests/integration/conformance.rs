//! The shared conformance suite against the real etcd at `DISTLOCK_ETCD_URL` (one node,
//! started by `scripts/test.sh`). Every case uses its own random keys.

use std::sync::Arc;

use distlock_api::DynLockStore;

async fn store() -> Option<Arc<DynLockStore>> {
    let url = distlock_conformance::kit::etcd_url("etcd conformance")?;
    Some(Arc::new(distlock_etcd::EtcdLockStore::connect(&url).await.expect("connect")))
}

distlock_conformance::conformance_suite!(store);
