//! The SQL stores' kept connections: acquire and release statements keep their connection
//! for the next one instead of giving it back to the pool after each statement.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Acquire + release cycles [`assert_kept`] runs.
pub const CYCLES: usize = 200;

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
