//! Machine-readable results: every report of the harness, also written as one JSON line
//! to `$DISTLOCK_BENCH_OUT/<suite>.jsonl` when that variable names a directory, for the
//! generator of `BENCHMARKS.md` and the plots (`scripts/bench.sh`).
//!
//! The suite is `$DISTLOCK_BENCH_SUITE` (the store or capability a benchmark run is
//! about: `redis`, `postgres`, `idempotency`, …), `bench` when unset.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The directory results are written to, when set.
pub const OUT_ENV: &str = "DISTLOCK_BENCH_OUT";
/// The suite a benchmark process reports under.
pub const SUITE_ENV: &str = "DISTLOCK_BENCH_SUITE";

/// One result line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A comparison: every variant beside the first, its baseline.
    Ratios(Ratios),
    /// One line of a plot.
    Series(Series),
}

impl Record {
    /// The suite the record belongs to.
    pub fn suite(&self) -> &str {
        match self {
            Self::Ratios(ratios) => &ratios.suite,
            Self::Series(series) => &series.suite,
        }
    }

    /// The comparison, if this is one.
    pub fn as_ratios(&self) -> Option<&Ratios> {
        match self {
            Self::Ratios(ratios) => Some(ratios),
            Self::Series(_) => None,
        }
    }

    /// The plot line, if this is one.
    pub fn as_series(&self) -> Option<&Series> {
        match self {
            Self::Series(series) => Some(series),
            Self::Ratios(_) => None,
        }
    }
}

/// Variants measured side by side, each as a ratio to the first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// The store or capability.
    pub suite: String,
    /// What was measured (scenario, tasks, cycles).
    pub title: String,
    /// The unit of [`RatioRow::value`], e.g. `µs/cycle`.
    pub unit: String,
    /// Rounds per variant.
    pub rounds: usize,
    /// The baseline first, then the variants compared with it.
    pub rows: Vec<RatioRow>,
}

/// One variant of a [`Ratios`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RatioRow {
    /// The variant.
    pub name: String,
    /// Its median round, in the comparison's unit.
    pub value: f64,
    /// The median of its per-round ratios to the baseline: the rounds are paired (a
    /// round's variants ran back to back, under the same load), so each ratio compares
    /// like with like. 1 for the baseline. A comparison of quantiles
    /// ([`Ratios::of_quantile`]) gives its quantile ÷ the baseline's instead.
    pub ratio: f64,
    /// The smallest per-round ratio (a round's variants ran back to back).
    pub min: f64,
    /// The largest per-round ratio.
    pub max: f64,
}

impl Ratios {
    /// The comparison of `samples` (each variant's rounds, the baseline first, rounds paired
    /// by index), each round divided by `per`: each variant's median round, and the
    /// median and range of its per-round ratios to the baseline.
    pub fn of(suite: &str, title: &str, unit: &str, per: f64, names: &[&str], samples: &[Vec<f64>]) -> Self {
        let medians: Vec<f64> = samples.iter().map(|s| super::median(s.clone()) / per).collect();
        let base = medians.first().copied().unwrap_or_default();
        let rows = names
            .iter()
            .zip(samples)
            .zip(&medians)
            .map(|((name, rounds), &value)| {
                let per_round: Vec<f64> = rounds.iter().zip(&samples[0]).map(|(own, first)| own / first).collect();
                RatioRow {
                    name: (*name).to_owned(),
                    value,
                    ratio: if base > 0.0 { super::median(per_round.clone()) } else { f64::NAN },
                    min: per_round.iter().copied().fold(f64::INFINITY, f64::min),
                    max: per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                }
            })
            .collect();
        Self {
            suite: suite.to_owned(),
            title: title.to_owned(),
            unit: unit.to_owned(),
            rounds: samples.first().map_or(0, Vec::len),
            rows,
        }
    }
}

impl Ratios {
    /// As [`of`](Self::of) with each round one sample (`per` 1), but each variant's value
    /// is the `q` quantile of its samples ([`quantile`]) rather than their median; the
    /// spread is still that of the per-round ratios (rounds paired by index, run back to
    /// back).
    pub fn of_quantile(suite: &str, title: &str, unit: &str, q: f64, names: &[&str], samples: &[Vec<f64>]) -> Self {
        let mut ratios = Self::of(suite, title, unit, 1.0, names, samples);
        let base = samples.first().map_or(0.0, |first| quantile(first, q));
        for (row, own) in ratios.rows.iter_mut().zip(samples) {
            row.value = quantile(own, q);
            row.ratio = if base > 0.0 { row.value / base } else { f64::NAN };
        }
        ratios
    }
}

/// The `q` quantile of `samples` (0 < q ≤ 1) by the nearest rank: the smallest sample
/// with at least `q` of the samples at or below it; 0 for none. With fewer than 100
/// samples the 0.99 quantile is the largest.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize).max(1);
    sorted.get(rank - 1).copied().unwrap_or_default()
}

/// The plots the harness draws; each knows its title and axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Figure {
    /// Release → next holder on one hot key: the share of hand-offs within x ms.
    Handoff,
    /// Each waiting task's mean wait for a hot key, fair vs barging, tasks ranked.
    FairWait,
    /// Time per acquire + release cycle vs the tasks cycling at once.
    CycleVsTasks,
    /// Time per acquire + release cycle of a lock group vs the keys it holds.
    CycleVsKeys,
}

impl Figure {
    /// Every figure, in the order documents show them.
    pub const ALL: [Self; 4] = [Self::Handoff, Self::FairWait, Self::CycleVsTasks, Self::CycleVsKeys];

    /// The file name stem of its SVG.
    pub fn file_stem(self) -> &'static str {
        match self {
            Self::Handoff => "handoff",
            Self::FairWait => "fair-wait",
            Self::CycleVsTasks => "cycle-vs-tasks",
            Self::CycleVsKeys => "cycle-vs-keys",
        }
    }

    /// The plot's caption.
    pub fn title(self) -> &'static str {
        match self {
            Self::Handoff => "Hand-off on one hot key (CDF)",
            Self::FairWait => "Per-task wait on one hot key",
            Self::CycleVsTasks => "Cycle time vs concurrent tasks",
            Self::CycleVsKeys => "Group cycle time vs keys held",
        }
    }

    /// The x axis.
    pub fn x_label(self) -> &'static str {
        match self {
            Self::Handoff => "release → next holder (ms)",
            Self::FairWait => "task, by mean wait",
            Self::CycleVsTasks => "tasks, each on its own key",
            Self::CycleVsKeys => "keys in the group",
        }
    }

    /// The y axis.
    pub fn y_label(self) -> &'static str {
        match self {
            Self::Handoff => "share of hand-offs",
            Self::FairWait => "mean wait (ms)",
            Self::CycleVsTasks | Self::CycleVsKeys => "µs per cycle",
        }
    }
}

/// One line of a [`Figure`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// The store or capability.
    pub suite: String,
    /// The plot it belongs to.
    pub figure: Figure,
    /// The line's name within its suite (`distlock`, `raw`, `fair`, `barging`).
    pub name: String,
    /// (x, y) points, in the figure's units.
    pub points: Vec<(f64, f64)>,
}

/// The suite this process reports under: `$DISTLOCK_BENCH_SUITE`, else `bench`.
pub fn suite() -> String {
    std::env::var(SUITE_ENV).ok().filter(|suite| !suite.trim().is_empty()).unwrap_or_else(|| "bench".to_owned())
}

/// Appends `record` to `$DISTLOCK_BENCH_OUT/<suite>.jsonl` when the variable is set; a
/// failure to write is reported on stderr (a benchmark's printed report stays complete).
pub fn emit(record: &Record) {
    let Some(dir) = std::env::var_os(OUT_ENV).filter(|dir| !dir.is_empty()) else {
        return;
    };
    if let Err(error) = append(Path::new(&dir), record) {
        eprintln!("distlock-bench: could not write a result to {}: {error}", Path::new(&dir).display());
    }
}

/// Appends `record` as one JSON line to `<dir>/<suite>.jsonl`, creating both as needed.
///
/// # Errors
///
/// When the directory or file cannot be created or written, or the suite is not a plain
/// file name.
pub fn append(dir: &Path, record: &Record) -> std::io::Result<()> {
    let suite = record.suite();
    if suite.is_empty() || !suite.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("suite `{suite}` is not made of letters, digits, `-` and `_`"),
        ));
    }
    std::fs::create_dir_all(dir)?;
    let mut line = serde_json::to_string(record).map_err(std::io::Error::other)?;
    line.push('\n');
    // One write per line: processes of one run appending to the same file do not interleave.
    let mut file = OpenOptions::new().create(true).append(true).open(dir.join(format!("{suite}.jsonl")))?;
    file.write_all(line.as_bytes())
}

/// Why results could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The directory or a file could not be read.
    Io {
        /// What was being read.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not a result.
    Parse {
        /// The file.
        path: PathBuf,
        /// Its line number, from 1.
        line: usize,
        /// The cause.
        source: serde_json::Error,
    },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io { path, .. } => write!(f, "could not read {}", path.display()),
            Self::Parse { path, line, .. } => write!(f, "{}:{line} is not a benchmark result", path.display()),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Parse { source, .. } => Some(source),
        }
    }
}

/// Every record of every `*.jsonl` file in `dir`, files in name order.
///
/// # Errors
///
/// When the directory or a file cannot be read, or a line is not a record.
pub fn read_dir(dir: &Path) -> Result<Vec<Record>, ReadError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReadError::Io { path, source }
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    files.sort();
    let mut records = Vec::new();
    for path in files {
        let file = std::fs::File::open(&path).map_err(io(&path))?;
        for (index, line) in BufReader::new(file).lines().enumerate() {
            let line = line.map_err(io(&path))?;
            if line.trim().is_empty() {
                continue;
            }
            let record = serde_json::from_str(&line).map_err(|source| ReadError::Parse {
                path: path.clone(),
                line: index + 1,
                source,
            })?;
            records.push(record);
        }
    }
    Ok(records)
}

/// A CDF of `samples`: (value, share of samples ≤ value), at most `points` points.
pub fn cdf(samples: &[f64], points: usize) -> Vec<(f64, f64)> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 || points == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(points).max(1);
    #[allow(clippy::cast_precision_loss)]
    let mut cdf: Vec<(f64, f64)> =
        (step - 1..n).step_by(step).map(|i| (sorted[i], (i + 1) as f64 / n as f64)).collect();
    if cdf.last().is_none_or(|&(_, share)| share < 1.0) {
        cdf.push((sorted[n - 1], 1.0));
    }
    cdf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_to_the_first_variant_with_the_spread_of_the_rounds() {
        let samples = vec![vec![100.0, 200.0, 100.0], vec![110.0, 240.0, 105.0]];
        let ratios = Ratios::of("redis", "t", "µs", 10.0, &["raw", "manager"], &samples);
        assert_eq!(ratios.rounds, 3);
        assert_eq!(ratios.rows[0].ratio, 1.0);
        assert_eq!((ratios.rows[0].min, ratios.rows[0].max), (1.0, 1.0));
        // medians 100 and 110 → 10 and 11 per op; per-round ratios 1.1, 1.2 and 1.05.
        assert!((ratios.rows[1].value - 11.0).abs() < 1e-9);
        assert!((ratios.rows[1].ratio - 1.1).abs() < 1e-9);
        // The ratio pairs rounds: not the ratio of medians taken from different rounds.
        let paired = Ratios::of(
            "redis",
            "t",
            "µs",
            1.0,
            &["raw", "manager"],
            &[vec![100.0, 50.0, 200.0], vec![100.0, 200.0, 50.0]],
        );
        assert_eq!(paired.rows[1].value, 100.0);
        assert!((paired.rows[1].ratio - 1.0).abs() < 1e-9, "{}", paired.rows[1].ratio);
        assert!((ratios.rows[1].min - 1.05).abs() < 1e-9);
        assert!((ratios.rows[1].max - 1.2).abs() < 1e-9);
    }

    #[test]
    fn quantiles_are_by_nearest_rank_and_ratios_of_quantiles_to_the_first() {
        let samples: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        assert_eq!(quantile(&samples, 0.5), 5.0);
        assert_eq!(quantile(&samples, 0.99), 10.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
        let ratios =
            Ratios::of_quantile("etcd", "t", "ms", 0.99, &["etcd", "distlock"], &[samples.clone(), vec![2.0; 10]]);
        assert_eq!((ratios.rows[0].value, ratios.rows[1].value), (10.0, 2.0));
        assert!((ratios.rows[1].ratio - 0.2).abs() < 1e-9);
        assert_eq!(ratios.rounds, 10);
    }

    #[test]
    fn a_cdf_ends_at_the_largest_sample_and_one() {
        let samples: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let points = cdf(&samples, 100);
        assert!(points.len() <= 101);
        assert_eq!(points.last(), Some(&(1000.0, 1.0)));
        assert!(points.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
        assert!(cdf(&[], 10).is_empty());
    }

    #[test]
    fn records_written_are_read_back_and_bad_suites_are_refused() {
        let dir = std::env::temp_dir().join(format!("distlock-bench-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let record = Record::Series(Series {
            suite: "memory".into(),
            figure: Figure::Handoff,
            name: "distlock".into(),
            points: vec![(0.1, 0.5), (0.2, 1.0)],
        });
        append(&dir, &record).unwrap();
        append(&dir, &record).unwrap();
        assert_eq!(read_dir(&dir).unwrap(), vec![record.clone(), record]);
        let bad = Record::Series(Series {
            suite: "../x".into(),
            figure: Figure::Handoff,
            name: "distlock".into(),
            points: vec![],
        });
        assert_eq!(append(&dir, &bad).unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
        std::fs::write(dir.join("broken.jsonl"), "{not json\n").unwrap();
        assert!(matches!(read_dir(&dir), Err(ReadError::Parse { line: 1, .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
