//! Deployments shared by the tests of one `scripts/test.sh` run.
//!
//! Under nextest every test is a process of its own, so a conformance suite on a Redis
//! Cluster, a Sentinel set or Redlock masters used to start (and stop) a deployment per
//! test — seconds each, most of those suites' time. `scripts/test.sh` exports
//! `DISTLOCK_KIT_SHARED_DIR` (a directory of its own scratch space) and
//! `DISTLOCK_KIT_OWNER_PID` (its own pid); then the first test that asks for a deployment
//! by name starts it, under a file lock, and writes its URL there, and the later ones
//! connect to it. A shared deployment's servers are not stopped by the test that started
//! them: their watchdogs (see `reaper`) kill them once the owner (the script) is gone.
//!
//! Tests that share a deployment must not depend on its state: the conformance cases use
//! keys of their own (a fresh UUID per case), as on the shared single-node servers. Fault
//! tests, which stop, pause or reconfigure servers, always start their own.
//!
//! Without those variables (`cargo test` by hand), every caller starts its own deployment,
//! as before.

use std::cell::Cell;
use std::fs::{self, OpenOptions};
use std::path::PathBuf;

thread_local! {
    /// While a shared deployment starts on this thread: the pid its watchdogs watch, and
    /// the directory its servers' files go in (removed with the run's scratch space).
    static OWNER: Cell<Option<u32>> = const { Cell::new(None) };
    static DIR: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
}

/// The pid whose end kills the servers this thread starts now: the run's owner while a
/// shared deployment starts, this process otherwise.
pub(crate) fn reap_owner() -> u32 {
    OWNER.with(Cell::get).unwrap_or_else(std::process::id)
}

/// Where the servers this thread starts now keep their files: the run's shared directory
/// while a shared deployment starts, the system's temporary directory otherwise.
pub(crate) fn server_dir() -> PathBuf {
    DIR.with(|dir| dir.borrow().clone()).unwrap_or_else(std::env::temp_dir)
}

/// The shared directory and the owner's pid, when this run shares deployments and its
/// owner is still alive.
fn sharing() -> Option<(PathBuf, u32)> {
    let dir = std::env::var_os("DISTLOCK_KIT_SHARED_DIR").filter(|dir| !dir.is_empty())?;
    let owner: u32 = std::env::var("DISTLOCK_KIT_OWNER_PID").ok()?.trim().parse().ok()?;
    std::path::Path::new(&format!("/proc/{owner}")).exists().then(|| (PathBuf::from(dir), owner))
}

/// Resets [`OWNER`] and [`DIR`] when a start returns or panics.
struct OwnerGuard;

impl Drop for OwnerGuard {
    fn drop(&mut self) {
        OWNER.with(|owner| owner.set(None));
        DIR.with(|dir| dir.borrow_mut().take());
    }
}

/// The deployment called `name` (e.g. `redis-cluster`) for a conformance suite: the
/// run's shared one when this run shares deployments (`(None, url)`; started by `start`
/// if no test has started it yet), otherwise a new one owned by the caller
/// (`(Some(deployment), url)`, stopped when dropped). `None` when `start` skips (the
/// server binary is missing and skipping is allowed).
///
/// # Panics
///
/// When the shared directory cannot be used, or `start` panics.
pub fn shared_or_own<T>(
    name: &str,
    start: impl FnOnce() -> Option<T>,
    url: impl Fn(&T) -> String,
) -> Option<(Option<T>, String)> {
    let Some((dir, owner)) = sharing() else {
        let own = start()?;
        let url = url(&own);
        return Some((Some(own), url));
    };
    fs::create_dir_all(&dir).unwrap_or_else(|err| panic!("create {}: {err}", dir.display()));
    let lock_path = dir.join(format!("{name}.lock"));
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .unwrap_or_else(|err| panic!("open {}: {err}", lock_path.display()));
    // Held until this function returns: one test starts the deployment, the others wait.
    lock.lock().unwrap_or_else(|err| panic!("lock {}: {err}", lock_path.display()));
    let url_path = dir.join(format!("{name}.url"));
    if let Ok(url) = fs::read_to_string(&url_path) {
        if !url.is_empty() {
            return Some((None, url));
        }
    }
    let started = {
        OWNER.with(|cell| cell.set(Some(owner)));
        DIR.with(|cell| *cell.borrow_mut() = Some(dir.clone()));
        let _reset = OwnerGuard;
        start()?
    };
    let shared_url = url(&started);
    // The deployment outlives this process: no destructor may stop it.
    std::mem::forget(started);
    fs::write(&url_path, &shared_url).unwrap_or_else(|err| panic!("write {}: {err}", url_path.display()));
    Some((None, shared_url))
}
