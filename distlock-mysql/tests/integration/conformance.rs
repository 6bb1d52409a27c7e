//! The shared conformance suite against a real MySQL or MariaDB server
//! (`DISTLOCK_MYSQL_URL`): the default table with release notifications, and a
//! non-default table whose waiters poll. Every case works in its own key namespace, so
//! the cases of a configuration share one table.

use std::sync::Arc;

use distlock_api::DynLockStore;
use distlock_mysql::MysqlLockStore;

async fn store() -> Option<Arc<DynLockStore>> {
    let url = distlock_conformance::kit::mysql_url("mysql conformance")?;
    let store = MysqlLockStore::connect(&url).await.expect("connect");
    store.ensure_schema().await.expect("schema");
    Some(Arc::new(store))
}

distlock_conformance::conformance_suite!(store);

/// A non-default table (its queue and group tables named after it), without release
/// notifications: waiters poll at their retry interval.
mod custom_table {
    use std::sync::Arc;

    use distlock_api::DynLockStore;
    use distlock_mysql::MysqlLockStore;

    async fn store() -> Option<Arc<DynLockStore>> {
        let url = distlock_conformance::kit::mysql_url("mysql conformance (custom table)")?;
        let store = MysqlLockStore::builder()
            .table("custom_leases")
            .release_notifications(false)
            .max_connections(4)
            .connect(&url)
            .await
            .expect("connect");
        store.ensure_schema().await.expect("schema");
        Some(Arc::new(store))
    }

    distlock_conformance::conformance_suite!(store);
}
