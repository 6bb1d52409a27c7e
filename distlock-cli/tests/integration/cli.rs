//! The `distlock` binary without a server: usage errors, refusals, help, and the memory
//! benchmark.

use crate::common::*;

#[tokio::test]
async fn run_refuses_the_memory_store_and_says_why() {
    for store in ["memory://", "MEMORY://"] {
        let out = output(distlock(Some(store), &["run", "--key", "k", "--", "true"])).await;
        assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
        let message = stderr(&out);
        assert!(message.contains("memory://") && message.contains("no other process"), "{message}");
    }
}

#[tokio::test]
async fn bad_durations_are_usage_errors_with_a_clear_message() {
    for (flag, value) in [("--ttl", "soon"), ("--wait", "5 parsecs"), ("--retry", "ten"), ("--kill-grace", "")] {
        let out =
            output(distlock(Some("redis://127.0.0.1:1"), &["run", "--key", "k", flag, value, "--", "true"])).await;
        assert_eq!(out.status.code(), Some(USAGE), "{flag} {value:?}: {}", stderr(&out));
        let message = stderr(&out);
        assert!(message.contains(flag) && message.contains("duration such as 30s"), "{message}");
        assert!(message.contains("--help"), "points to the usage: {message}");
    }
}

#[tokio::test]
async fn a_kill_grace_that_does_not_fit_in_the_ttl_is_a_usage_error() {
    let args = ["run", "--key", "k", "--ttl", "2s", "--kill-grace", "5s", "--", "true"];
    let out = output(distlock(Some("redis://127.0.0.1:1"), &args)).await;
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    assert!(stderr(&out).contains("--kill-grace 5s does not fit in --ttl 2s"), "{}", stderr(&out));
}

/// Flags that cannot go together are refused in one line naming both, never quietly
/// ignored (a plain lock taken for `--key x --permits 3`).
#[tokio::test]
async fn conflicting_flags_are_one_line_naming_both() {
    for (args, names) in [
        (&["run", "--key", "k", "--permits", "3", "--", "true"][..], ["--key", "--permits"]),
        (&["run", "--key", "k", "--owner", "app@one", "--", "true"], ["--key", "--owner"]),
        (&["run", "--key", "k", "--read", "r", "--", "true"], ["--key", "--read"]),
        (&["run", "--read", "r", "--no-wait", "--wait", "1s", "--", "true"], ["--no-wait", "--wait"]),
    ] {
        let out = output(distlock(Some("redis://127.0.0.1:1"), args)).await;
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {}", stderr(&out));
        let message = stderr(&out);
        assert_eq!(message.trim_end().lines().count(), 1, "{args:?}: {message}");
        assert!(names.iter().all(|name| message.contains(name)), "{args:?}: {message}");
    }
}

#[tokio::test]
async fn out_of_range_options_are_usage_errors_before_any_connection() {
    // Port 1 would fail to connect: the options must be refused first.
    for args in [
        &["run", "--key", "k", "--ttl", "0s", "--", "true"][..],
        &["run", "--key", "k", "--ttl", "1s", "--kill-grace", "100ms", "--renew-every", "2s", "--", "true"],
        &["run", "--key", "k", "--wait", "1s", "--retry", "0s", "--", "true"],
        // Waiting without a deadline (the default) needs a pause between attempts too.
        &["run", "--key", "k", "--retry", "0s", "--", "true"],
    ] {
        let out = output(distlock(Some("redis://127.0.0.1:1"), args)).await;
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("invalid lock options"), "{}", stderr(&out));
    }
}

#[tokio::test]
async fn bad_keys_tokens_and_missing_stores_are_usage_errors() {
    let token = "4f1c0a4e-8d5b-4d61-9a8e-0c2b7f3e9a10";
    for (store, args) in [
        (Some("redis://127.0.0.1:1"), &["run", "--key", "", "--", "true"][..]),
        (Some("redis://127.0.0.1:1"), &["inspect", "bad\u{7}key"]),
        (Some("redis://127.0.0.1:1"), &["release", "k", "--token", "not-a-token"]),
        (None, &["run", "--key", "k", "--", "true"]),
        (None, &["inspect", "k"]),
        (None, &["release", "k", "--token", token]),
        (Some("zk://127.0.0.1"), &["inspect", "k"]),
        (Some("redis://127.0.0.1:1"), &["run", "--key", "k"]),
        (Some("redis://127.0.0.1:1"), &["run", "--", "true"]),
        (Some("redis://127.0.0.1:1"), &["run", "k", "true"]),
        (Some("redis://127.0.0.1:1"), &["run", "", "--", "true"]),
        (Some("redis://127.0.0.1:1"), &["frobnicate"]),
    ] {
        // Without a store and without a state directory there is no default store either.
        let out = output(distlock(store, args)).await;
        assert_eq!(out.status.code(), Some(USAGE), "{store:?} {args:?}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty());
    }
}

/// Without --store or DISTLOCK_STORE, commands use the embedded store in the user's
/// state directory: created on first use, shown by --help and by `list`, and shared by
/// the processes of the host (a lock held by one `run` is seen by `inspect`).
#[tokio::test]
async fn the_default_store_is_the_embedded_one_in_the_state_directory() {
    let state = std::env::temp_dir().join(format!("distlock-cli-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let database = state.join("distlock").join("locks.db");
    let with_state = |args: &[&str]| {
        let mut command = distlock(None, args);
        command.env("XDG_STATE_HOME", &state);
        command
    };
    let help = stdout(&output(with_state(&["--help"])).await);
    let url = format!("sqlite://{}", database.display());
    assert!(help.contains(&url), "--help names the default store {url}:\n{help}");

    // The command, run under the lock, inspects it through the default store too.
    let inspect = format!("{} inspect default-store-key", env!("CARGO_BIN_EXE_distlock"));
    // `distlock run KEY -- CMD`: the key before `--`.
    let out = output(with_state(&["run", "default-store-key", "--", "sh", "-c", &inspect])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stdout(&out).contains("free"), "the lock is held while the command runs:\n{}", stdout(&out));
    assert!(database.is_file(), "the database was created at {}", database.display());

    let out = output(with_state(&["list"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains(&url), "list names the store: {}", stderr(&out));
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test]
async fn bad_groups_owners_and_permits_are_usage_errors_before_any_connection() {
    // Port 1 would fail to connect (69): each must be refused first, naming the problem.
    for (args, needle) in [
        (&["run", "--key", "k", "--read", "a", "--", "true"][..], "cannot be used with"),
        (&["run", "--write", "a", "--key", "k", "--", "true"], "cannot be used with"),
        (&["run", "--read", "a", "--write", "a", "--", "true"], "`a` appears more than once"),
        (&["run", "--read", "a", "--read", "a", "--", "true"], "`a` appears more than once"),
        (&["run", "--ttl", "5s", "--", "true"], "no lock given"),
        (&["run", "--ttl", "5s", "k", "true"], "no lock given"),
        (&["run", "--read", "a", "--permits", "0", "--", "true"], "--permits"),
        (&["run", "--write", "a", "--permits", "2", "--", "true"], "--read"),
        (&["run", "--key", "k", "--owner", "app@one", "--", "true"], "cannot be used with"),
        (&["run", "--read", "a", "--owner", "no-at-sign", "--", "true"], "app@instance"),
        (&["run", "--read", "", "--", "true"], "the key is empty"),
        (&["release", "--owner", "a@b@c"], "app@instance"),
        (&["release", "k", "--owner", "app@one"], "cannot be used with"),
        (&["release", "--owner", "app@one", "--token", "4f1c0a4e-8d5b-4d61-9a8e-0c2b7f3e9a10"], "cannot be used with"),
        (&["release"], "<KEY|--owner <APP@INSTANCE>>"),
        (&["permits", "p", "--shared", "0"], "--shared"),
        (&["permits", "p", "--exclusive", "0"], "--exclusive"),
        (&["permits", "p", "--shared", "2", "--clear-shared"], "cannot be used with"),
        (&["permits", "bad\u{7}name"], "control character"),
        (&["inspect", "k", "--json", "--format", "table"], "cannot be used with"),
    ] {
        let out = output(distlock(Some("redis://127.0.0.1:1"), args)).await;
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: `{needle}` missing from:\n{}", stderr(&out));
    }
    let out = output(distlock(Some("memory://"), &["permits", "p"])).await;
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    assert!(stderr(&out).contains("memory://"), "{}", stderr(&out));
    let out = output(distlock(Some("memory://"), &["run", "--read", "p", "--", "true"])).await;
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
}

#[tokio::test]
async fn exit_status_flags_are_checked_before_any_connection() {
    for flag in ["--conflict-exit-code", "-E", "--lost-exit-code", "--error-exit-code"] {
        for value in ["0", "256", "-1", "seventy"] {
            let args = ["run", "--key", "k", flag, value, "--", "true"];
            let out = output(distlock(Some("redis://127.0.0.1:1"), &args)).await;
            assert_eq!(out.status.code(), Some(USAGE), "{flag} {value}: {}", stderr(&out));
            assert!(stderr(&out).contains("exit-code"), "names the flag: {}", stderr(&out));
        }
    }
    let out = output(distlock(
        Some("redis://127.0.0.1:1"),
        &["run", "--key", "k", "--wait", "1s", "--no-wait", "--", "true"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    // A wrong command line stays 64 whatever --error-exit-code says.
    let args = ["run", "--key", "k", "--ttl", "2s", "--kill-grace", "5s", "--error-exit-code", "9", "--", "true"];
    let out = output(distlock(Some("redis://127.0.0.1:1"), &args)).await;
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
}

#[tokio::test]
async fn error_exit_code_replaces_the_status_of_an_unreachable_store() {
    let args = ["run", "--key", "k", "--error-exit-code", "9", "--", "true"];
    let out = output(distlock(Some("redis://127.0.0.1:1"), &args)).await;
    assert_eq!(out.status.code(), Some(9), "{}", stderr(&out));
    assert!(stderr(&out).contains("redis"), "says what failed: {}", stderr(&out));
}

#[tokio::test]
async fn the_keeper_and_launcher_are_not_for_hand_use() {
    for marker in ["__distlock-keeper", "__distlock-exec"] {
        let out = output(distlock(None, &[marker])).await;
        assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
        assert!(stderr(&out).contains("distlock run"), "{}", stderr(&out));
    }
}

#[tokio::test]
async fn an_unreachable_store_is_status_69() {
    let out = output(distlock(Some("redis://127.0.0.1:1"), &["inspect", "k"])).await;
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert!(stderr(&out).contains("redis"), "{}", stderr(&out));
}

#[tokio::test]
async fn help_documents_the_exit_statuses_and_environment() {
    let out = output(distlock(None, &["run", "--help"])).await;
    assert_eq!(out.status.code(), Some(0));
    let help = stdout(&out);
    for needle in [
        "75",
        "76",
        "64",
        "DISTLOCK_KEY",
        "DISTLOCK_TOKEN",
        "DISTLOCK_FENCE",
        "DISTLOCK_NAMES",
        "DISTLOCK_OWNER",
        "DISTLOCK_STORE",
        "--read",
        "--write",
        "--permits",
        "--owner",
        "--kill-grace",
        "Exit status:",
        "--conflict-exit-code",
        "--lost-exit-code",
        "--error-exit-code",
        "as long as it takes",
        "SIGKILL of distlock",
        "SIGSTOP of distlock",
        "etcdctl lock",
    ] {
        assert!(help.contains(needle), "`{needle}` missing from run --help:\n{help}");
    }
}

#[tokio::test]
async fn bench_on_memory_reports_zero_violations_and_the_raw_ratio() {
    let out = output(distlock(None, &["bench", "--duration", "100ms", "--workers", "4", "--baseline", "--json"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bench --json prints JSON");
    assert_eq!(report["store"], "memory");
    assert_eq!(report["violations"], 0);
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 6, "3 scenarios × (distlock, raw): {report:#}");
    for row in rows {
        assert_eq!(row["violations"], 0, "{row:#}");
        assert!(row["ops"].as_u64().expect("ops") > 0, "{row:#}");
        let is_library = row["implementation"] == "distlock";
        assert_eq!(row["vs_raw"]["time_per_op"].is_f64(), is_library, "{row:#}");
    }
}

#[tokio::test]
async fn bench_prints_a_table_by_default() {
    let out = output(distlock(None, &["bench", "--duration", "50ms", "--scenarios", "uncontended,hot-key"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("store memory") && table.contains("uncontended") && table.contains("hot-key"), "{table}");
    assert!(!table.contains("distinct "), "{table}");
}

#[tokio::test]
async fn bench_plot_writes_svg_plots_and_their_results() {
    let dir = std::env::temp_dir().join(format!("distlock-cli-plot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (plots, results) = (dir.join("plots"), dir.join("results"));
    let plots_arg = plots.to_str().expect("a UTF-8 temporary directory");
    let args = ["bench", "--duration", "30ms", "--workers", "2", "--retry", "5ms", "--baseline", "--plot", plots_arg];
    let mut command = distlock(None, &args);
    command.env("DISTLOCK_BENCH_OUT", &results).env("DISTLOCK_BENCH_SUITE", "memory");
    let out = output(command).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for name in ["handoff", "cycle-vs-tasks", "cycle-vs-keys", "fair-wait"] {
        let path = plots.join(format!("{name}.svg"));
        let svg = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{}: {svg}", path.display());
        assert!(svg.contains("<polyline"), "{} draws no line", path.display());
    }
    let handoff = std::fs::read_to_string(plots.join("handoff.svg")).expect("handoff.svg");
    assert!(handoff.contains("distlock") && handoff.contains("raw"), "a line for distlock and for raw");
    // The same series, as results for scripts/bench.sh's generator.
    let lines = std::fs::read_to_string(results.join("memory.jsonl")).expect("results written");
    for figure in ["\"handoff\"", "\"cycle-vs-tasks\"", "\"cycle-vs-keys\"", "\"fair-wait\""] {
        assert!(lines.contains(figure), "{figure} missing from the results:\n{lines}");
    }
    assert!(lines.contains("fair vs barging waiting"), "{lines}");
    std::fs::remove_dir_all(&dir).expect("remove the scratch directory");
}

#[tokio::test]
async fn bench_plot_into_a_file_fails_with_its_own_status() {
    let file = std::env::temp_dir().join(format!("distlock-cli-plot-file-{}", std::process::id()));
    std::fs::write(&file, "not a directory").expect("write a file");
    let args = ["bench", "--duration", "10ms", "--workers", "2", "--scenarios", "uncontended", "--plot"];
    let mut command = distlock(None, &args);
    command.arg(&file);
    let out = output(command).await;
    assert_eq!(out.status.code(), Some(73), "{}", stderr(&out));
    assert!(stderr(&out).contains("--plot: could not write"), "{}", stderr(&out));
    std::fs::remove_file(&file).expect("remove the file");
}
