//! Rewrites `BENCHMARKS.md` and its SVG plots from the results of one benchmark run:
//!
//! ```text
//! bench-report RESULTS_DIR MARKDOWN_FILE SVG_DIR
//! ```
//!
//! `RESULTS_DIR` holds the `*.jsonl` files the harness wrote (`DISTLOCK_BENCH_OUT`) and
//! `run.json` (machine, date, command, servers); `scripts/bench.sh` runs it last. The plots
//! are linked from the document by their path relative to the document's folder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use distlock_bench::document::{self, RunInfo};
use distlock_bench::record;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [results, markdown, svg_dir] = args.as_slice() else {
        eprintln!("usage: bench-report RESULTS_DIR MARKDOWN_FILE SVG_DIR");
        return ExitCode::from(2);
    };
    match generate(results, markdown, svg_dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let mut message = error.to_string();
            let mut source = error.source();
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("bench-report: {message}");
            ExitCode::FAILURE
        }
    }
}

fn generate(results: &Path, markdown: &Path, svg_dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let run_file = results.join("run.json");
    let run: RunInfo = serde_json::from_slice(
        &std::fs::read(&run_file).map_err(|error| format!("could not read {}: {error}", run_file.display()))?,
    )
    .map_err(|error| format!("{} is not a run description: {error}", run_file.display()))?;
    let records = record::read_dir(results)?;
    let base = markdown.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let link_prefix = relative(base, svg_dir);
    let files = document::write_plots(&records, svg_dir, &link_prefix)?;
    std::fs::write(markdown, document::render(&run, &records, &files))
        .map_err(|error| format!("could not write {}: {error}", markdown.display()))?;
    println!(
        "bench-report: {} ({} results, {} plots in {})",
        markdown.display(),
        records.len(),
        files.len(),
        svg_dir.display()
    );
    Ok(())
}

/// `svg_dir` as a link prefix from `base` (`docs/bench/` from the repository's root).
fn relative(base: &Path, svg_dir: &Path) -> String {
    let dir = svg_dir.strip_prefix(base).unwrap_or(svg_dir);
    let mut prefix = dir.to_string_lossy().replace('\\', "/");
    if !prefix.is_empty() && !prefix.ends_with('/') {
        prefix.push('/');
    }
    prefix
}
