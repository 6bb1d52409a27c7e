//! The shared conformance suite against a real PostgreSQL, with the default table, a
//! non-default schema and table, and an UNLOGGED table.
//!
//! The three tables are fixed (the cases of a configuration share one, each in its own
//! key namespace), so the first store of each configuration in a test run purges rows
//! whose lease ended more than [`MIN_PURGE_HORIZON`](distlock_postgres::MIN_PURGE_HORIZON)
//! ago: the tables stay bounded across runs, and no running case can lose a row it uses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use distlock_api::DynLockStore;
use distlock_postgres::{PostgresLockStore, MIN_PURGE_HORIZON};

/// `ensure_schema`, and once per test process and table (`purged`) a purge of old rows.
async fn prepared(store: PostgresLockStore, purged: &AtomicBool) -> Option<Arc<DynLockStore>> {
    store.ensure_schema().await.expect("schema");
    if !purged.swap(true, Ordering::SeqCst) {
        store.purge(MIN_PURGE_HORIZON).await.expect("purge old rows");
    }
    Some(Arc::new(store))
}

async fn store() -> Option<Arc<DynLockStore>> {
    static PURGED: AtomicBool = AtomicBool::new(false);
    let url = distlock_conformance::kit::postgres_url("postgres conformance")?;
    // A small pool, as the other configurations: a case uses few connections at once, and
    // the suite must fit a stock server's `max_connections` (see the README).
    let store = PostgresLockStore::builder().max_connections(4).connect(&url).await.expect("connect");
    prepared(store, &PURGED).await
}

distlock_conformance::conformance_suite!(store);

/// A non-default schema and table (shared by the cases of this module; every case works
/// in its own key namespace).
mod custom_table {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use distlock_api::DynLockStore;
    use distlock_postgres::PostgresLockStore;

    async fn store() -> Option<Arc<DynLockStore>> {
        static PURGED: AtomicBool = AtomicBool::new(false);
        let url = distlock_conformance::kit::postgres_url("postgres conformance (custom table)")?;
        let store = PostgresLockStore::builder()
            .schema("distlock_conformance")
            .table("custom_leases")
            .sequence("custom_fences")
            .max_connections(4)
            .connect(&url)
            .await
            .expect("connect");
        super::prepared(store, &PURGED).await
    }

    distlock_conformance::conformance_suite!(store);
}

/// An UNLOGGED lease table.
mod unlogged {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use distlock_api::DynLockStore;
    use distlock_postgres::PostgresLockStore;

    async fn store() -> Option<Arc<DynLockStore>> {
        static PURGED: AtomicBool = AtomicBool::new(false);
        let url = distlock_conformance::kit::postgres_url("postgres conformance (unlogged)")?;
        let store = PostgresLockStore::builder()
            .schema("distlock_conformance")
            .table("unlogged_leases")
            .unlogged(true)
            .max_connections(4)
            .connect(&url)
            .await
            .expect("connect");
        super::prepared(store, &PURGED).await
    }

    distlock_conformance::conformance_suite!(store);
}
