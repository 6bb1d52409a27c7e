//! Choosing and connecting the store.

use std::sync::Arc;

use distlock::DynLockStore;

use crate::exit::Failure;

/// The store URL of a command that needs one.
pub(crate) fn require_url<'a>(url: Option<&'a str>, command: &str) -> Result<&'a str, Failure> {
    match url {
        Some(url) if !url.trim().is_empty() => Ok(url),
        _ => Err(Failure::usage(format!(
            "`{command}` needs a store: pass --store URL or set DISTLOCK_STORE (redis://… or postgres://…)"
        ))),
    }
}

/// Whether `url` names the in-process store.
pub(crate) fn is_memory(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("memory"))
}

/// Refuses `memory://` for a command whose lock must be seen by other processes.
pub(crate) fn refuse_memory(url: &str, command: &str) -> Result<(), Failure> {
    if is_memory(url) {
        return Err(Failure::usage(format!(
            "`{command}` cannot use memory://: an in-memory lock lives inside this one distlock process, \
             so no other process could see it or be excluded by it. Use a shared store: \
             --store redis://HOST:6379 or --store postgres://USER@HOST/DB"
        )));
    }
    Ok(())
}

/// Connects to the store at `url` (PostgreSQL: creating the lease table if needed).
pub(crate) async fn connect(url: &str) -> Result<Arc<DynLockStore>, Failure> {
    Ok(distlock::connect(url).await?)
}
