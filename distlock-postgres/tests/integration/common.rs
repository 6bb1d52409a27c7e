//! Shared helpers of the store's integration tests: a store on a fresh random table.
#![allow(dead_code, unreachable_pub)]

use distlock_api::{LockKey, StoreKey};
use distlock_conformance::kit::{self, postgres_server};
use distlock_postgres::{sqlx, PostgresLockStore};

/// The schema every test table of this crate lives in (its sequence is shared).
pub const TEST_SCHEMA: &str = "distlock_test";

/// A store on a new random table in [`TEST_SCHEMA`]; drop it with [`TestTable::drop`].
pub struct TestTable {
    pub store: PostgresLockStore,
    pub url: String,
    pub application_name: String,
}

impl TestTable {
    /// `None` (after printing why) when `DISTLOCK_POSTGRES_URL` is unset.
    pub async fn new(test: &str) -> Option<Self> {
        Self::with(test, false).await
    }

    pub async fn with(test: &str, unlogged: bool) -> Option<Self> {
        Self::sized(test, unlogged, 8).await
    }

    /// As [`with`](Self::with), with a pool of at most `connections`.
    pub async fn sized(test: &str, unlogged: bool, connections: u32) -> Option<Self> {
        let url = kit::postgres_url(test)?;
        let application_name = postgres_server::random_identifier("dl_test");
        let store = PostgresLockStore::builder()
            .schema(TEST_SCHEMA)
            .table(postgres_server::random_identifier("t"))
            .unlogged(unlogged)
            .application_name(&application_name)
            .max_connections(connections)
            .connect(&url)
            .await
            .expect("connect");
        store.ensure_schema().await.expect("ensure_schema");
        Some(Self { store, url, application_name })
    }

    /// Runs `sql` with `{table}` replaced by the store's quoted table name.
    pub async fn admin(&self, sql: &str) -> u64 {
        postgres_server::execute(&self.url, &sql.replace("{table}", &self.store.table_name())).await
    }

    /// Ages the lease of `key`: its lease ended `interval` (SQL text) ago.
    pub async fn age(&self, key: &StoreKey, interval: &str) {
        let sql = format!(
            "UPDATE {} SET expires_at = clock_timestamp() - interval '{interval}' WHERE key = $1",
            self.store.table_name()
        );
        let done = sqlx::query(&sql).bind(key.as_str()).execute(self.store.pool()).await.expect("age the row");
        assert_eq!(done.rows_affected(), 1, "no row for {key}");
    }

    pub async fn row_count(&self) -> i64 {
        let sql = format!("SELECT count(*) FROM {}", self.store.table_name());
        sqlx::query_scalar(&sql).fetch_one(self.store.pool()).await.expect("count rows")
    }

    /// The quoted name of an object named after the table: `"<schema>"."<table>_<suffix>"`
    /// (test tables have short names, so the store derives them so).
    pub fn derived(&self, suffix: &str) -> String {
        let table = self.store.table_name();
        format!("{}_{suffix}\"", table.strip_suffix('"').expect("quoted"))
    }

    /// The text of one of the store's `.sql` files (`lease/reacquire.sql`…) for this table,
    /// as a store with release notifications runs it.
    pub fn sql_file(&self, text: &str) -> String {
        // The store notifies: keep the `{notify}` sections, drop the `{silent}` ones.
        let (mut kept, mut rest, mut keep) = (String::new(), text, true);
        loop {
            let marker =
                ["{notify}", "{silent}", "{end}"].into_iter().filter_map(|m| rest.find(m).map(|at| (at, m))).min();
            let Some((at, marker)) = marker else { break };
            if keep {
                kept.push_str(&rest[..at]);
            }
            keep = marker != "{silent}";
            rest = &rest[at + marker.len()..];
        }
        if keep {
            kept.push_str(rest);
        }
        kept.replace("{table}", &self.store.table_name()).replace("{sequence}", &self.store.sequence_name())
    }

    pub async fn drop(self) {
        self.store.pool().close().await;
        let (holders, permits, function) =
            (self.derived("holders"), self.derived("permits"), self.derived("acquire_group"));
        let (values, queue) = (self.derived("values"), self.derived("queue"));
        self.admin(&format!(
            "DROP TABLE IF EXISTS {{table}}, {holders}, {permits}, {values}, {queue}; DROP FUNCTION IF EXISTS {function}"
        ))
        .await;
    }
}

/// A store key in a random namespace.
pub fn key(name: &str) -> StoreKey {
    let prefix = postgres_server::random_identifier("k");
    LockKey::new(format!("{prefix}:{name}")).expect("valid key").to_store_key()
}
