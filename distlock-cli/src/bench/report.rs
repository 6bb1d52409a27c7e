//! The benchmark's table and JSON.

use std::time::Duration;

use distlock::Capabilities;
use distlock_bench::Measured;
use serde::Serialize;

use crate::cli::{BenchArgs, Scenario};

/// Everything one `bench` printed, as `--json` shows it.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    store: &'static str,
    fencing: bool,
    release_notifications: bool,
    workers: u16,
    duration_ms: u128,
    ttl_ms: u128,
    retry_ms: u128,
    rows: Vec<Row>,
    /// Violations summed over every row; always 0 unless a lock is broken.
    pub(crate) violations: u64,
}

/// One scenario run by one implementation.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    scenario: Scenario,
    /// `distlock` or `raw`.
    implementation: &'static str,
    workers: usize,
    ops: u64,
    elapsed_ms: f64,
    ops_per_sec: f64,
    /// What the latencies measure: `cycle` (acquire + release) or `hand-off`.
    latency: &'static str,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    violations: u64,
    /// Releases that found their lease expired (a TTL shorter than a cycle).
    lost_leases: u64,
    /// distlock beside the raw commands, when `--baseline` ran them.
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_raw: Option<Ratio>,
}

/// distlock's figures divided by the raw baseline's: above 1 means distlock is slower.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Ratio {
    /// Time per operation (the inverse ratio of throughputs).
    time_per_op: f64,
    /// Median latency.
    p50: Option<f64>,
}

fn micros(duration: Option<Duration>) -> Option<f64> {
    duration.map(|duration| duration.as_secs_f64() * 1e6)
}

impl Row {
    pub(crate) fn new(scenario: Scenario, implementation: &'static str, workers: usize, measured: &Measured) -> Self {
        Self {
            scenario,
            implementation,
            workers: if scenario == Scenario::Uncontended { 1 } else { workers },
            ops: measured.ops,
            elapsed_ms: measured.elapsed.as_secs_f64() * 1e3,
            ops_per_sec: measured.ops_per_sec(),
            latency: if scenario == Scenario::HotKey { "hand-off" } else { "cycle" },
            p50_us: micros(measured.quantile(0.50)),
            p99_us: micros(measured.quantile(0.99)),
            violations: measured.violations,
            lost_leases: measured.lost,
            vs_raw: None,
        }
    }

    /// Records how this row compares with the raw `baseline` of the same scenario.
    pub(crate) fn compare_with(&mut self, baseline: &Self) {
        let time_per_op = baseline.ops_per_sec / self.ops_per_sec.max(f64::MIN_POSITIVE);
        let p50 = match (self.p50_us, baseline.p50_us) {
            (Some(ours), Some(raw)) if raw > 0.0 => Some(ours / raw),
            _ => None,
        };
        self.vs_raw = Some(Ratio { time_per_op, p50 });
    }
}

impl Report {
    pub(crate) fn new(store: &'static str, capabilities: Capabilities, args: &BenchArgs, rows: Vec<Row>) -> Self {
        let violations = rows.iter().map(|row| row.violations).sum();
        Self {
            store,
            fencing: capabilities.fencing,
            release_notifications: capabilities.release_notifications,
            workers: args.workers,
            duration_ms: args.duration.as_millis(),
            ttl_ms: args.ttl.as_millis(),
            retry_ms: args.retry.as_millis(),
            rows,
            violations,
        }
    }

    /// Prints the human-readable table on stdout.
    pub(crate) fn print_table(&self) {
        let mut features = Vec::new();
        if self.fencing {
            features.push("fencing");
        }
        if self.release_notifications {
            features.push("release notifications");
        }
        let features = if features.is_empty() { String::new() } else { format!(" ({})", features.join(", ")) };
        println!(
            "distlock bench · store {}{features} · {} workers · {} per run · ttl {} · retry {}",
            self.store,
            self.workers,
            humantime::format_duration(Duration::from_millis(u64::try_from(self.duration_ms).unwrap_or(u64::MAX))),
            humantime::format_duration(Duration::from_millis(u64::try_from(self.ttl_ms).unwrap_or(u64::MAX))),
            humantime::format_duration(Duration::from_millis(u64::try_from(self.retry_ms).unwrap_or(u64::MAX))),
        );
        println!();
        println!(
            "{:<12} {:<9} {:>7} {:>10} {:>9} {:>9} {:>9} {:>10}  vs raw (time/op)",
            "scenario", "impl", "workers", "ops", "ops/s", "p50", "p99", "violations"
        );
        for row in &self.rows {
            let ratio = row.vs_raw.map_or_else(String::new, |ratio| times(ratio.time_per_op));
            println!(
                "{:<12} {:<9} {:>7} {:>10} {:>9} {:>9} {:>9} {:>10}  {}",
                row.scenario.name(),
                row.implementation,
                row.workers,
                row.ops,
                si(row.ops_per_sec),
                latency(row.p50_us),
                latency(row.p99_us),
                row.violations,
                ratio,
            );
        }
        println!();
        println!("latency: acquire + release cycle; hot-key: hand-off, from the holder sending its release to the next holder having the lock");
        if self.rows.iter().any(|row| row.vs_raw.is_some()) {
            println!(
                "vs raw: distlock's time per operation ÷ the raw commands' (1.00× = no overhead; below 1 = faster)"
            );
        }
        let lost: u64 = self.rows.iter().map(|row| row.lost_leases).sum();
        if lost > 0 {
            println!("warning: {lost} lease(s) expired before their release; use a longer --ttl");
        }
    }
}

/// 1234567.0 → "1.23M".
fn si(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

/// A ratio with enough digits to tell small ones apart: 1.08×, 0.012×.
fn times(ratio: f64) -> String {
    if ratio >= 0.1 {
        format!("{ratio:.2}×")
    } else {
        format!("{ratio:.3}×")
    }
}

fn latency(micros: Option<f64>) -> String {
    match micros {
        None => "-".to_owned(),
        Some(us) if us < 1.0 => format!("{:.0}ns", us * 1e3),
        Some(us) if us < 1_000.0 => format!("{us:.1}µs"),
        Some(us) => format!("{:.2}ms", us / 1e3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(si(1_234_567.0), "1.23M");
        assert_eq!(si(12_345.0), "12.3k");
        assert_eq!(si(12.0), "12");
        assert_eq!(latency(Some(0.25)), "250ns");
        assert_eq!(latency(Some(45.04)), "45.0µs");
        assert_eq!(latency(Some(1_500.0)), "1.50ms");
        assert_eq!(latency(None), "-");
        assert_eq!(times(1.0831), "1.08×");
        assert_eq!(times(0.0123), "0.012×");
    }
}
