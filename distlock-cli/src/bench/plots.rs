//! `distlock bench --plot DIR`: the harness's plot measurements on the user's store, drawn
//! by the harness's plotting code (the same plots `scripts/bench.sh` draws for every
//! store). With `DISTLOCK_BENCH_OUT` set, the series and comparisons are also written
//! there as results.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use distlock::DynLockStore;
use distlock_bench::record::{self, Record};
use distlock_bench::sweep::{self, SweepPlan};
use distlock_bench::{plot, Measured};

use super::{failure, Bench};
use crate::cli::BenchArgs;
use crate::exit::{self, Failure};

/// How long each waiting task holds the hot key in the fairness comparison.
const HOLD: Duration = Duration::from_millis(2);

/// Measures the plots' series on `store` (each point for `--duration`), adds the hand-off
/// distributions of the hot-key runs in `handoffs`, and writes the SVGs into `dir`.
pub(super) async fn draw(
    store: &Arc<DynLockStore>,
    bench: &Bench,
    args: &BenchArgs,
    handoffs: &[(&str, Measured)],
    dir: &Path,
) -> Result<(), Failure> {
    let suite = std::env::var(record::SUITE_ENV).unwrap_or_else(|_| store.backend().to_owned());
    let plan =
        SweepPlan { per_point: args.duration, ttl: args.ttl, retry: args.retry, hot_tasks: bench.workers, hold: HOLD };
    eprintln!(
        "distlock bench: measuring the plots ({} points of {:?} each)",
        sweep::TASKS.len() + sweep::KEYS.len() + 2,
        args.duration
    );
    let prefix = format!("distlock-bench:{}:plot:", bench.run_id);
    let (mut series, ratios) = sweep::plot_series(store, &suite, &prefix, &plan).await.map_err(failure)?;
    series.extend(handoffs.iter().map(|(name, measured)| sweep::handoff_series(&suite, name, measured)));
    for ratios in ratios {
        record::emit(&Record::Ratios(ratios));
    }
    for series in &series {
        record::emit(&Record::Series(series.clone()));
    }
    let written = plot::write_store(dir, store.backend(), &series)
        .map_err(|error| Failure::new(exit::CANT_CREATE, format!("--plot: {error}")))?;
    for path in written {
        eprintln!("distlock bench: wrote {}", path.display());
    }
    Ok(())
}
