//! The SQL stores' kept connections: acquire and release statements keep their connection
//! for the next one instead of giving it back to the pool after each statement.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::pool::PoolOptions;
use sqlx::{Database, Pool};

/// Acquire + release cycles [`assert_kept`] runs.
pub const CYCLES: usize = 200;

/// A pool of at most `connections` on `url` (5 s acquire timeout) and the count of the
/// connections given back to it (sqlx pings each of them then), for [`assert_kept`].
///
/// # Panics
///
/// When the pool cannot connect.
pub async fn counting_pool<DB: Database>(url: &str, connections: u32) -> (Pool<DB>, Arc<AtomicUsize>) {
    let returned = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&returned);
    let pool = PoolOptions::<DB>::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(5))
        .after_release(move |_, _| {
            counter.fetch_add(1, Ordering::Relaxed);
            Box::pin(async { Ok(true) })
        })
        .connect(url)
        .await
        .expect("pool");
    (pool, returned)
}

/// Runs `cycle` (one acquire and one release) [`CYCLES`] times and asserts that few
/// connections went back to the pool meanwhile: `returned` counts them (a pool's
/// `after_release` hook), and the pool holds at most `connections`. Through the pool each
/// of the 400 statements would give its connection back; kept, a connection goes back once
/// out of the pool for 250 ms or unused for 50 ms.
pub async fn assert_kept<F, Fut>(returned: &AtomicUsize, connections: usize, mut cycle: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let before = returned.load(Ordering::Relaxed);
    let started = Instant::now();
    for _ in 0..CYCLES {
        cycle().await;
    }
    let given_back = returned.load(Ordering::Relaxed) - before;
    let periods =
        usize::try_from(started.elapsed().as_millis() / Duration::from_millis(50).as_millis()).unwrap_or(usize::MAX);
    let bound = connections.saturating_add(periods.saturating_mul(2)).min(2 * CYCLES / 4);
    assert!(given_back <= bound, "{given_back} connections went back to the pool in {CYCLES} cycles (at most {bound})");
}
