//! The shared conformance suite against a real MySQL or MariaDB server
//! (`DISTLOCK_MYSQL_URL`), with the default table and with a non-default one. Every case
//! works in its own key namespace, so the cases of a configuration share one table.

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

/// A non-default table (its queue and group tables named after it).
mod custom_table {
    use std::sync::Arc;

    use distlock_api::DynLockStore;
    use distlock_mysql::MysqlLockStore;

    async fn store() -> Option<Arc<DynLockStore>> {
        let url = distlock_conformance::kit::mysql_url("mysql conformance (custom table)")?;
        let store =
            MysqlLockStore::builder().table("custom_leases").max_connections(4).connect(&url).await.expect("connect");
        store.ensure_schema().await.expect("schema");
        Some(Arc::new(store))
    }

    distlock_conformance::conformance_suite!(store);
}
