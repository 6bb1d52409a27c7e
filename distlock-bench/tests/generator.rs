//! The generator of `BENCHMARKS.md` on a fixed, small results directory: the tables, the
//! header and the plots it writes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/results")
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("distlock-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn assert_svg(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let document = roxmltree::Document::parse(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    assert_eq!(document.root_element().tag_name().name(), "svg", "{}", path.display());
    let lines =
        document.descendants().filter(|node| node.has_tag_name("polyline") || node.has_tag_name("path")).count();
    assert!(lines > 0, "{} draws no line", path.display());
}

#[test]
fn the_generator_writes_the_tables_and_valid_svg_plots() {
    let out = scratch("generator");
    let markdown = out.join("BENCHMARKS.md");
    let svg_dir = out.join("docs/bench");
    let status =
        Command::new(env!("CARGO_BIN_EXE_bench-report")).arg(fixture()).arg(&markdown).arg(&svg_dir).status().unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&markdown).unwrap();

    // The run, once, at the top.
    let header = text.split("\n## ").next().unwrap();
    for expected in ["2 logical cores (Test CPU)", "Redis 7.0", "2026-01-02", "`scripts/bench.sh --quick`"] {
        assert!(header.contains(expected), "header lacks {expected}:\n{header}");
    }
    // A run's load is noise of the day, not a figure: a `load` in run.json is not shown.
    assert!(!header.contains("0.10 0.20 0.30"), "header shows the load average:\n{header}");
    // A section per store, then per capability, in order.
    let headings: Vec<&str> = text.lines().filter_map(|line| line.strip_prefix("## ")).collect();
    assert_eq!(headings, ["Memory", "Redis", "Locks", "Hand-off", "Fairness", "Lock groups", "Idempotency"]);
    // A store's full table: every variant with its ratio and spread.
    assert!(text.contains("| manager | 0.90 | 1.80× | 1.70×–1.90× |"), "{text}");
    // A capability's rows across stores.
    assert!(text.contains("| Memory | uncontended acquire+release, 1 task, 50000 cycles/round | manager ÷ raw | 0.90 µs/cycle | 1.80× | 1.70×–1.90× |"), "{text}");
    assert!(
        text.contains(
            "| Redis | two-name group vs single-key cycle | two-name group ÷ single-key lock | 60.0 µs/cycle | 1.20× | 1.10×–1.25× |"
        ),
        "{text}"
    );
    assert!(text.contains("| library | 110 | 1.10× | 1.05×–1.15× |"), "{text}");
    // The plots, linked relative to the document and written as SVG.
    for name in ["handoff", "fair-wait-redis", "cycle-vs-tasks", "cycle-vs-keys"] {
        assert!(text.contains(&format!("](docs/bench/{name}.svg)")), "no link to {name}:\n{text}");
        assert_svg(&svg_dir.join(format!("{name}.svg")));
    }
    let handoff = std::fs::read_to_string(svg_dir.join("handoff.svg")).unwrap();
    assert!(handoff.contains("Memory") && handoff.contains("Redis"), "one line per store");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_store_whose_results_appear_gets_its_section() {
    let out = scratch("new-store");
    let results = out.join("results");
    std::fs::create_dir_all(&results).unwrap();
    for file in ["run.json", "memory.jsonl"] {
        std::fs::copy(fixture().join(file), results.join(file)).unwrap();
    }
    std::fs::write(
        results.join("sqlite.jsonl"),
        r#"{"kind":"ratios","suite":"sqlite","title":"uncontended acquire+release, 1 task","unit":"µs/cycle","rounds":3,"rows":[{"name":"raw","value":20,"ratio":1.0,"min":1.0,"max":1.0},{"name":"manager","value":21,"ratio":1.05,"min":1.0,"max":1.1}]}"#,
    )
    .unwrap();
    let markdown = out.join("BENCHMARKS.md");
    let status = Command::new(env!("CARGO_BIN_EXE_bench-report"))
        .arg(&results)
        .arg(&markdown)
        .arg(out.join("svg"))
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&markdown).unwrap();
    assert!(text.contains("\n## SQLite\n"), "{text}");
    assert!(
        text.contains(
            "| SQLite | uncontended acquire+release, 1 task | manager ÷ raw | 21.0 µs/cycle | 1.05× | 1.00×–1.10× |"
        ),
        "{text}"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn the_generator_refuses_a_results_directory_without_its_run() {
    let out = scratch("no-run");
    let status =
        Command::new(env!("CARGO_BIN_EXE_bench-report")).arg(&out).arg(out.join("B.md")).arg(&out).output().unwrap();
    assert!(!status.status.success());
    assert!(String::from_utf8_lossy(&status.stderr).contains("run.json"));
    assert!(!out.join("B.md").exists());
    std::fs::remove_dir_all(&out).unwrap();
}
