//! The shared conformance suite against a real PostgreSQL, with the default table, a
//! non-default schema and table, and an UNLOGGED table.

use std::sync::Arc;

use distlock_api::DynLockStore;

async fn store() -> Option<Arc<DynLockStore>> {
    let url = distlock_conformance::kit::postgres_url("postgres conformance")?;
    let store = distlock_postgres::PostgresLockStore::connect(&url).await.expect("connect");
    store.ensure_schema().await.expect("schema");
    Some(Arc::new(store))
}

distlock_conformance::conformance_suite!(store);

/// A non-default schema and table (shared by the cases of this module; every case works
/// in its own key namespace).
mod custom_table {
    use std::sync::Arc;

    use distlock_api::DynLockStore;
    use distlock_postgres::PostgresLockStore;

    async fn store() -> Option<Arc<DynLockStore>> {
        let url = distlock_conformance::kit::postgres_url("postgres conformance (custom table)")?;
        let store = PostgresLockStore::builder()
            .schema("distlock_conformance")
            .table("custom_leases")
            .sequence("custom_fences")
            .max_connections(4)
            .connect(&url)
            .await
            .expect("connect");
        store.ensure_schema().await.expect("schema");
        Some(Arc::new(store))
    }

    distlock_conformance::conformance_suite!(store);
}

/// An UNLOGGED lease table.
mod unlogged {
    use std::sync::Arc;

    use distlock_api::DynLockStore;
    use distlock_postgres::PostgresLockStore;

    async fn store() -> Option<Arc<DynLockStore>> {
        let url = distlock_conformance::kit::postgres_url("postgres conformance (unlogged)")?;
        let store = PostgresLockStore::builder()
            .schema("distlock_conformance")
            .table("unlogged_leases")
            .unlogged(true)
            .max_connections(4)
            .connect(&url)
            .await
            .expect("connect");
        store.ensure_schema().await.expect("schema");
        Some(Arc::new(store))
    }

    distlock_conformance::conformance_suite!(store);
}
