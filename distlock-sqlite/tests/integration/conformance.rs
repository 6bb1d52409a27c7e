//! The whole conformance suite against the SQLite store: each case in a database file of
//! its own, and again with every case sharing one file.

use std::path::PathBuf;
use std::sync::Arc;

use distlock_api::{DynLockStore, Token};
use distlock_sqlite::SqliteLockStore;

/// A directory of this test run's own under the system's temporary directory.
fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("distlock-sqlite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

mod own_file {
    use super::*;

    async fn store() -> Option<Arc<DynLockStore>> {
        let path = scratch_dir().join(format!("{}.db", Token::generate().short()));
        let url = format!("sqlite://{}", path.display());
        Some(Arc::new(SqliteLockStore::connect(&url).await.expect("connect")))
    }

    distlock_conformance::conformance_suite!(store);
}

mod shared_file {
    use super::*;

    async fn store() -> Option<Arc<DynLockStore>> {
        let url = format!("sqlite://{}", scratch_dir().join("shared.db").display());
        Some(Arc::new(SqliteLockStore::connect(&url).await.expect("connect")))
    }

    distlock_conformance::conformance_suite!(store);
}
