//! `BENCHMARKS.md` and its plots, generated from the results of one run
//! ([`record::read_dir`](super::record::read_dir)): the machine, date and command once at
//! the top, one section per store with its full tables, then one section per capability
//! that puts the stores' figures of that capability side by side, with the plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::plot::{self, Line, PlotError};
use super::record::{Figure, Ratios, Record, Series};

/// How and where the results were measured: `run.json` in the results directory, written
/// by `scripts/bench.sh` before the first benchmark.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RunInfo {
    /// The day of the run (UTC), `YYYY-MM-DD`.
    pub date: String,
    /// The command that produced the results.
    pub command: String,
    /// The CPU model.
    #[serde(default)]
    pub cpu: String,
    /// Logical cores.
    pub cores: u32,
    /// The servers' versions, one phrase.
    #[serde(default)]
    pub servers: String,
}

/// The stores, in the order of their sections: (suite, heading). A suite not listed here
/// gets a section of its own after these, headed by its name.
const STORES: [(&str, &str); 8] = [
    ("memory", "Memory"),
    ("redis", "Redis"),
    ("redis-groups", "Redis"),
    ("redis-scale", "Redis Cluster and Redlock"),
    ("postgres", "PostgreSQL"),
    ("etcd", "etcd"),
    ("mysql", "MySQL"),
    ("sqlite", "SQLite"),
];

/// The capabilities, in the order of their sections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Capability {
    Locks,
    Handoff,
    Fairness,
    Groups,
    Election,
    Idempotency,
    Versioned,
    ScaleOut,
}

impl Capability {
    const ALL: [Self; 8] = [
        Self::Locks,
        Self::Handoff,
        Self::Fairness,
        Self::Groups,
        Self::Election,
        Self::Idempotency,
        Self::Versioned,
        Self::ScaleOut,
    ];

    fn heading(self) -> &'static str {
        match self {
            Self::Locks => "Locks",
            Self::Handoff => "Hand-off",
            Self::Fairness => "Fairness",
            Self::Groups => "Lock groups",
            Self::Election => "Leader election",
            Self::Idempotency => "Idempotency",
            Self::Versioned => "Versioned updates",
            Self::ScaleOut => "Scale-out",
        }
    }

    /// Suites that are about one capability rather than one store.
    fn of_suite(suite: &str) -> Option<Self> {
        match suite {
            "idempotency" => Some(Self::Idempotency),
            "versioned" => Some(Self::Versioned),
            "peers" => Some(Self::Locks),
            _ => None,
        }
    }

    /// The capability a store's table is about, from its suite, title and variants (the
    /// readers and writers of one name say groups where the title does not).
    fn of(ratios: &Ratios) -> Self {
        if let Some(capability) = Self::of_suite(&ratios.suite) {
            return capability;
        }
        if ratios.suite == "redis-scale" {
            return Self::ScaleOut;
        }
        let title = ratios.title.to_lowercase();
        let names: Vec<String> = ratios.rows.iter().map(|row| row.name.to_lowercase()).collect();
        let has = |words: &[&str]| {
            words.iter().any(|word| title.contains(word) || names.iter().any(|name| name.contains(word)))
        };
        if title.contains("election") {
            Self::Election
        } else if has(&["group", "read lock", "readers", "writer"]) {
            Self::Groups
        } else if has(&["fair", "barging"]) {
            Self::Fairness
        } else if has(&["hand-off", "hot key"]) {
            Self::Handoff
        } else {
            Self::Locks
        }
    }

    /// The plots shown in this capability's section.
    fn figures(self) -> &'static [Figure] {
        match self {
            Self::Locks => &[Figure::CycleVsTasks],
            Self::Handoff => &[Figure::Handoff],
            Self::Fairness => &[Figure::FairWait],
            Self::Groups => &[Figure::CycleVsKeys],
            _ => &[],
        }
    }
}

/// The heading of `suite`'s section.
fn suite_heading(suite: &str) -> String {
    STORES
        .iter()
        .find(|(name, _)| *name == suite)
        .map_or_else(|| suite.to_owned(), |(_, heading)| (*heading).to_owned())
}

/// An SVG written by [`write_plots`]: its figure, the suite it is limited to (the
/// per-store fairness plots) and its path relative to the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotFile {
    /// What it shows.
    pub figure: Figure,
    /// The one suite it shows, or `None` for every store.
    pub suite: Option<String>,
    /// Where the document links it.
    pub link: String,
}

/// Draws the plots of `records` into `dir`: one per figure with a line per store, except
/// fair vs barging waiting, which gets one plot per store (`fair-wait-<suite>.svg`). A
/// store's lines are its `distlock` series; the plots link as `<link_prefix><file>`.
///
/// # Errors
///
/// As [`plot::write`].
pub fn write_plots(records: &[Record], dir: &Path, link_prefix: &str) -> Result<Vec<PlotFile>, PlotError> {
    let series: Vec<&Series> =
        records.iter().filter_map(Record::as_series).filter(|series| !series.points.is_empty()).collect();
    let mut files = Vec::new();
    let mut link = |figure: Figure, suite: Option<String>, path: PathBuf| {
        let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        files.push(PlotFile { figure, suite, link: format!("{link_prefix}{name}") });
    };
    for figure in Figure::ALL {
        let of_figure: Vec<&Series> = series.iter().copied().filter(|series| series.figure == figure).collect();
        if figure == Figure::FairWait {
            let suites: BTreeMap<&str, Vec<&Series>> = of_figure.iter().fold(BTreeMap::new(), |mut map, series| {
                map.entry(series.suite.as_str()).or_insert_with(Vec::new).push(*series);
                map
            });
            for (suite, lines) in suites {
                let lines: Vec<Line<'_>> =
                    lines.iter().map(|series| Line { label: &series.name, points: &series.points }).collect();
                let stem = format!("{}-{suite}", figure.file_stem());
                let path = plot::write(dir, &stem, figure, &suite_heading(suite), &lines)?;
                link(figure, Some(suite.to_owned()), path);
            }
            continue;
        }
        let labels: Vec<String> = of_figure.iter().map(|series| suite_heading(&series.suite)).collect();
        let lines: Vec<Line<'_>> = of_figure
            .iter()
            .zip(&labels)
            .filter(|(series, _)| series.name == "distlock")
            .map(|(series, label)| Line { label, points: &series.points })
            .collect();
        if !lines.is_empty() {
            let path = plot::write(dir, figure.file_stem(), figure, "distlock", &lines)?;
            link(figure, None, path);
        }
    }
    Ok(files)
}

/// `1.034×`, or `–` for a ratio that could not be computed.
fn times(ratio: f64) -> String {
    if ratio.is_finite() {
        format!("{ratio:.2}×")
    } else {
        "–".to_owned()
    }
}

fn value(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// A table's caption line.
fn caption(out: &mut String, ratios: &Ratios) {
    let _ = writeln!(
        out,
        "**{}** ({} rounds; ratio to `{}`, spread over the rounds)\n",
        ratios.title,
        ratios.rounds,
        ratios.rows.first().map_or("", |row| row.name.as_str())
    );
}

/// A store's or capability suite's table: every variant, its median and its ratio.
fn full_table(out: &mut String, ratios: &Ratios) {
    caption(out, ratios);
    let _ = writeln!(out, "| variant | {} | ratio | spread |\n|---|---:|---:|---:|", ratios.unit);
    for row in &ratios.rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}–{} |",
            row.name,
            value(row.value),
            times(row.ratio),
            times(row.min),
            times(row.max)
        );
    }
    out.push('\n');
}

fn plots(out: &mut String, files: &[PlotFile], figure: Figure) {
    for file in files.iter().filter(|file| file.figure == figure) {
        let alt = match &file.suite {
            Some(suite) => format!("{} ({})", figure.title(), suite_heading(suite)),
            None => figure.title().to_owned(),
        };
        let _ = writeln!(out, "![{alt}]({})\n", file.link);
    }
}

/// `BENCHMARKS.md` for `records`, measured as `run` says, with the plots `files` (as
/// [`write_plots`] returned them).
pub fn render(run: &RunInfo, records: &[Record], files: &[PlotFile]) -> String {
    let tables: Vec<&Ratios> =
        records.iter().filter_map(Record::as_ratios).filter(|ratios| !ratios.rows.is_empty()).collect();
    let mut out = String::new();
    out.push_str("# Benchmarks\n\n");
    out.push_str(
        "Current reference figures of distlock, every one measured side by side with its \
         baseline in the same run: the store's own commands sent raw (or a peer crate, or \
         a single node), on the same server and connection (on the SQL stores, through \
         the same pool, as `sqlx::query(…).execute(&pool)` sends them: sqlx pings each \
         connection given back to the pool, which the stores skip by keeping their \
         connection between acquisitions and releases), in rounds that rotate the order \
         of the variants; where a title says they take turns, the variants \
         alternate within each round, cycle by cycle (or a batch of cycles at a time), so \
         that a slower stretch of the machine meets them all. Each row gives the median \
         round, the ratio to the baseline (the median of the per-round ratios, each \
         between variants that ran under the same load; above 1: slower than the \
         baseline) and the spread of the per-round ratios (min–max). Servers run on \
         loopback, started privately for the run. Each benchmark runs as a task on the \
         worker threads of a multi-threaded tokio runtime, where an application's code \
         runs.\n\n",
    );
    let _ = writeln!(out, "- **Machine:** {} logical cores{}", run.cores, optional(" (", &run.cpu, ")"));
    let _ = writeln!(out, "- **Date:** {}", run.date);
    if !run.servers.is_empty() {
        let _ = writeln!(out, "- **Servers:** {}", run.servers);
    }
    let _ = writeln!(out, "- **Command:** `{}`\n", run.command);

    let mut suites: Vec<&str> = Vec::new();
    for (suite, _) in STORES {
        if tables.iter().any(|table| table.suite == suite) {
            suites.push(suite);
        }
    }
    for table in &tables {
        let suite = table.suite.as_str();
        if Capability::of_suite(suite).is_none() && !suites.contains(&suite) {
            suites.push(suite);
        }
    }
    let mut headings: Vec<String> = suites.iter().map(|suite| suite_heading(suite)).collect();
    headings.dedup();
    for heading in headings {
        let _ = writeln!(out, "## {heading}\n");
        for table in tables.iter().filter(|table| suite_heading(&table.suite) == heading) {
            full_table(&mut out, table);
        }
    }

    for capability in Capability::ALL {
        let of_capability: Vec<&&Ratios> = tables.iter().filter(|table| Capability::of(table) == capability).collect();
        let has_plot = capability.figures().iter().any(|&figure| files.iter().any(|file| file.figure == figure));
        if of_capability.is_empty() && !has_plot {
            continue;
        }
        let _ = writeln!(out, "## {}\n", capability.heading());
        for &figure in capability.figures() {
            plots(&mut out, files, figure);
        }
        let (own, by_store): (Vec<&&Ratios>, Vec<&&Ratios>) =
            of_capability.into_iter().partition(|table| Capability::of_suite(&table.suite).is_some());
        if !by_store.is_empty() {
            out.push_str(
                "| store | measured | variant ÷ baseline | variant | ratio | spread |\n|---|---|---|---:|---:|---:|\n",
            );
            for table in by_store {
                let base = table.rows.first().map_or("", |row| row.name.as_str());
                // A figure without a baseline (one variant) is listed as it is.
                if let [row] = table.rows.as_slice() {
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} | {} {} | – | – |",
                        suite_heading(&table.suite),
                        table.title,
                        row.name,
                        value(row.value),
                        table.unit
                    );
                    continue;
                }
                for row in table.rows.iter().skip(1) {
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} ÷ {base} | {} {} | {} | {}–{} |",
                        suite_heading(&table.suite),
                        table.title,
                        row.name,
                        value(row.value),
                        table.unit,
                        times(row.ratio),
                        times(row.min),
                        times(row.max)
                    );
                }
            }
            out.push('\n');
        }
        for table in own {
            full_table(&mut out, table);
        }
    }
    out
}

fn optional(before: &str, text: &str, after: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!("{before}{text}{after}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(suite: &str, title: &str, names: &[&str]) -> Ratios {
        let samples: Vec<Vec<f64>> = names.iter().map(|_| vec![1.0]).collect();
        Ratios::of(suite, title, "µs", 1.0, names, &samples)
    }

    #[test]
    fn tables_go_to_the_capability_their_title_or_variants_name() {
        let of = |title: &str, names: &[&str]| Capability::of(&table("sqlite", title, names));
        assert_eq!(of("uncontended acquire+release, 1 task", &["raw", "store", "manager"]), Capability::Locks);
        assert_eq!(of("lock groups: one task", &["single-key lock", "two-name group"]), Capability::Groups);
        assert_eq!(of("one name, 8 tasks × 20 sections holding 5ms", &["writers", "readers"]), Capability::Groups);
        assert_eq!(of("fair vs barging waiting, 8 tasks on one hot key", &["barging", "fair"]), Capability::Fairness);
        assert_eq!(Capability::of(&table("idempotency", "claims", &["raw", "store"])), Capability::Idempotency);
        // What the hand-off and fair-waiting comparisons of the conformance kit write.
        let hand_off = "hand-off p50 on one hot key, 8 waiters, hold 0, retry 50ms";
        assert_eq!(of(hand_off, &["polling", "notified"]), Capability::Handoff);
        let waits = "fair waiting, 8 processes × 1 tasks on one key, hold 2ms: worst task p99 wait, each ÷ its variant's fair share";
        assert_eq!(of(waits, &["fair share", "fair", "barging"]), Capability::Fairness);
        let throughput = "fair waiting, 8 tasks on one key, hold 2ms: sections per second";
        assert_eq!(of(throughput, &["barging", "fair"]), Capability::Fairness);
        // What the election comparison writes, with or without etcd's own election beside it.
        let hand_over = "election: graceful hand-over, resign() → the waiting candidate leads, TTL 2s, p50";
        assert_eq!(of(hand_over, &["etcd election", "distlock"]), Capability::Election);
        assert_eq!(of(hand_over, &["distlock"]), Capability::Election);
    }

    #[test]
    fn a_figure_without_a_baseline_is_listed_in_its_capability() {
        let one = table("redis", "election: observer lag, TTL 2s, p50", &["distlock"]);
        let out = render(&RunInfo::default(), &[Record::Ratios(one)], &[]);
        assert!(out.contains("## Leader election"), "{out}");
        assert!(out.contains("| Redis | election: observer lag, TTL 2s, p50 | distlock | 1.00 µs | – | – |"), "{out}");
    }
}
