//! The versioned-update cases that SQLite and MySQL run alike: `cases!(Db, setup)`
//! expands to one test per case, `setup(test)` giving a pool and a fresh table
//! `(id BIGINT PRIMARY KEY, counter BIGINT NOT NULL DEFAULT 0, title TEXT, version
//! <integer> NOT NULL DEFAULT 0, fence BIGINT)` holding row 1 at version 0.

macro_rules! cases {
    ($db:ty, $setup:ident) => {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::Arc;

        use distlock_optimistic::{FencedOut, OptimisticError, StaleRecord, VersionedUpdate};

        type Update = VersionedUpdate<$db>;

        async fn read(pool: &sqlx::Pool<$db>, table: &str) -> (i64, i64) {
            sqlx::query_as(&format!("SELECT counter, CAST(version AS SIGNED) FROM {table} WHERE id = 1"))
                .fetch_one(pool)
                .await
                .expect("read row")
        }

        #[derive(Debug, sqlx::FromRow)]
        #[allow(dead_code)]
        struct Row {
            id: i64,
            counter: i64,
            title: Option<String>,
            version: i64,
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn concurrent_read_modify_write_loses_no_update() {
            let Some((pool, table)) = $setup("concurrent").await else { return };
            const TASKS: u64 = 6;
            const INCREMENTS: u64 = 15;
            let stale = Arc::new(AtomicU64::new(0));
            let mut tasks = Vec::new();
            for _ in 0..TASKS {
                let (pool, table, stale) = (pool.clone(), table.clone(), stale.clone());
                tasks.push(tokio::spawn(async move {
                    let mut done = 0;
                    while done < INCREMENTS {
                        let (counter, version) = read(&pool, &table).await;
                        let outcome = Update::new(&table)
                            .key("id", 1_i64)
                            .version("version", version)
                            .set("counter", counter + 1)
                            .execute(&pool)
                            .await;
                        match outcome {
                            Ok(new_version) => {
                                assert_eq!(new_version, version + 1);
                                done += 1;
                            }
                            Err(OptimisticError::Stale(StaleRecord { expected_version, .. })) => {
                                assert_eq!(expected_version, version);
                                stale.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(other) => panic!("unexpected error: {other}"),
                        }
                    }
                }));
            }
            for task in tasks {
                task.await.expect("task");
            }
            let expected = i64::try_from(TASKS * INCREMENTS).unwrap();
            assert_eq!(read(&pool, &table).await, (expected, expected), "every successful update counted once");
        }

        #[tokio::test]
        async fn outcomes_are_told_apart() {
            let Some((pool, table)) = $setup("outcomes").await else { return };
            let update = |id: i64, version: i64| Update::new(&table).key("id", id).version("version", version);
            assert_eq!(update(1, 0).set("title", "a").execute(&pool).await.unwrap(), 1);
            let err = update(1, 0).set("title", "b").execute(&pool).await.unwrap_err();
            match &err {
                OptimisticError::Stale(stale) => {
                    assert_eq!((stale.table.as_str(), stale.id.as_str()), (table.as_str(), "1"));
                    assert_eq!(stale.id.as_integer(), Some(1), "an integer key is a number");
                    assert_eq!((stale.expected_version, stale.actual_version), (0, Some(1)));
                }
                other => panic!("expected Stale, got {other}"),
            }
            assert!(err.is_conflict());
            let err = update(2, 0).set("title", "b").execute(&pool).await.unwrap_err();
            assert!(matches!(&err, OptimisticError::NotFound { id, .. } if id == "2"), "{err}");
            // force: no check, still a bump, and the new version is known.
            assert_eq!(update(1, 99).force().set("title", "admin").execute(&pool).await.unwrap(), 2);
            let err = update(2, 0).force().execute(&pool).await.unwrap_err();
            assert!(matches!(err, OptimisticError::NotFound { .. }), "{err:?}");
            update(1, 2).set_some("title", None::<&str>).set_some("counter", Some(5_i64)).execute(&pool).await.unwrap();
            let title: Option<String> =
                sqlx::query_scalar(&format!("SELECT title FROM {table} WHERE id = 1")).fetch_one(&pool).await.unwrap();
            assert_eq!(title.as_deref(), Some("admin"));
            assert_eq!(read(&pool, &table).await, (5, 3));
        }

        #[tokio::test]
        async fn returning_gives_the_updated_row() {
            let Some((pool, table)) = $setup("returning").await else { return };
            let title = String::from("new");
            let row: Row = Update::new(&table)
                .key("id", 1_i64)
                .version("version", 0_i64)
                .set("title", &title)
                .set("counter", 41_i64)
                .execute_returning(&pool)
                .await
                .unwrap();
            assert_eq!((row.id, row.counter, row.title.as_deref(), row.version), (1, 41, Some("new"), 1));
            let row: Row =
                Update::new(&table).key("id", 1_i64).version("version", 0).force().execute_returning(&pool).await.unwrap();
            assert_eq!(row.version, 2);
            let err = Update::new(&table)
                .key("id", 1_i64)
                .version("version", 0)
                .execute_returning::<Row, _>(&pool)
                .await
                .unwrap_err();
            assert!(matches!(err, OptimisticError::Stale(StaleRecord { actual_version: Some(2), .. })), "{err}");
            let err = Update::new(&table).key("id", 9_i64).version("version", 0).execute_returning::<Row, _>(&pool).await;
            assert!(matches!(err, Err(OptimisticError::NotFound { .. })), "{err:?}");
        }

        #[tokio::test]
        async fn works_in_a_transaction_and_on_a_connection() {
            let Some((pool, table)) = $setup("transaction").await else { return };
            let mut tx = pool.begin().await.unwrap();
            let version =
                Update::new(&table).key("id", 1_i64).version("version", 0).set("counter", 7_i64).execute(&mut *tx).await;
            assert_eq!(version.unwrap(), 1);
            // Refused inside the caller's transaction: told apart there too.
            let err = Update::new(&table).key("id", 1_i64).version("version", 0).execute(&mut *tx).await.unwrap_err();
            assert!(matches!(err, OptimisticError::Stale(StaleRecord { actual_version: Some(1), .. })), "{err}");
            tx.rollback().await.unwrap();
            assert_eq!(read(&pool, &table).await, (0, 0), "rolled back with the transaction");
            let mut conn = pool.acquire().await.unwrap();
            let version = Update::new(&table).key("id", 1_i64).version("version", 0).execute(&mut *conn).await.unwrap();
            assert_eq!(version, 1);
        }

        #[tokio::test]
        async fn fenced_writes_refuse_a_lower_fence() {
            let Some((pool, table)) = $setup("fenced").await else { return };
            let write = |version: i64, fence: u64| {
                Update::new(&table).key("id", 1_i64).version("version", version).fenced("fence", fence).set("counter", 1_i64)
            };
            assert_eq!(write(0, 10).execute(&pool).await.unwrap(), 1);
            let err = write(1, 9).execute(&pool).await.unwrap_err();
            assert!(
                matches!(err, OptimisticError::FencedOut(FencedOut { fence: 9, current_fence: Some(10), .. })),
                "{err}"
            );
            assert_eq!(write(1, 10).execute(&pool).await.unwrap(), 2);
            assert_eq!(read(&pool, &table).await, (1, 2));
        }
    };
}
