//! The test kit: where the servers are, and real fault hooks.
//!
//! Tests find servers through environment variables: `DISTLOCK_REDIS_URL`,
//! `DISTLOCK_POSTGRES_URL` and `DISTLOCK_MYSQL_URL` (and `DISTLOCK_ETCD_URL` for the etcd store). When one is not set, a test prints that it skipped —
//! unless `DISTLOCK_REQUIRE_SERVICES=1` (set by `scripts/test.sh` and CI), which turns
//! the skip into a failure.

pub use distlock_bench as bench;
pub mod child;
pub mod etcd_server;
pub mod fair_bench;
pub mod faults;
pub mod group_bench;
pub mod handoff;
pub mod kept;
pub mod mysql_server;
pub mod postgres_server;
pub mod proxy;
mod reaper;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
pub mod shared;
pub mod sql_bench;

/// Whether `DISTLOCK_REQUIRE_SERVICES=1`: a missing server fails the test instead of
/// skipping it.
pub fn services_required() -> bool {
    std::env::var("DISTLOCK_REQUIRE_SERVICES").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// libfaketime's preload library, where Debian's `faketime` package puts it (which
/// `scripts/test.sh` installs): tests that give a child process another wall clock run it
/// with `LD_PRELOAD` set to this and `FAKETIME` to the offset.
pub fn libfaketime() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let mut dirs = vec![PathBuf::from("/usr/lib/faketime"), PathBuf::from("/usr/local/lib/faketime")];
    for entry in std::fs::read_dir("/usr/lib").into_iter().flatten().flatten() {
        dirs.push(entry.path().join("faketime"));
    }
    dirs.into_iter().map(|dir| dir.join("libfaketime.so.1")).find(|path| path.exists())
}

/// An empty directory of one test's own under the system's temporary directory:
/// `distlock-<name>-<pid>`, emptied first when it exists. Process ids come back, and the
/// temporary directory outlives a run, so a directory named after the pid alone may hold
/// an earlier process's files.
///
/// # Panics
///
/// When the directory cannot be made.
pub fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("distlock-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
    dir
}

/// The value of the environment variable `var` naming a server URL, or `None` after
/// printing that `test` skipped.
///
/// # Panics
///
/// When the variable is unset and [`services_required`] — CI never skips.
pub fn server_url(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if services_required() => {
            panic!("{test}: {var} is not set and DISTLOCK_REQUIRE_SERVICES=1 forbids skipping")
        }
        _ => {
            eprintln!("SKIPPED {test}: set {var} to run it against a real server");
            None
        }
    }
}

/// `DISTLOCK_REDIS_URL`, see [`server_url`].
pub fn redis_url(test: &str) -> Option<String> {
    server_url("DISTLOCK_REDIS_URL", test)
}

/// `DISTLOCK_POSTGRES_URL`, see [`server_url`].
pub fn postgres_url(test: &str) -> Option<String> {
    server_url("DISTLOCK_POSTGRES_URL", test)
}

/// `DISTLOCK_MYSQL_URL` (`mysql://user@host:port/database`), see [`server_url`].
pub fn mysql_url(test: &str) -> Option<String> {
    server_url("DISTLOCK_MYSQL_URL", test)
}

/// `DISTLOCK_ETCD_URL` (`etcd://host:port[,host:port…]`), see [`server_url`].
pub fn etcd_url(test: &str) -> Option<String> {
    server_url("DISTLOCK_ETCD_URL", test)
}
