//! Choosing and connecting the store.

use std::path::PathBuf;
use std::sync::Arc;

use distlock::DynLockStore;

use crate::exit::{self, Failure};

/// The store of a command: `--store` / `DISTLOCK_STORE` when given, otherwise the
/// embedded store in the user's state directory ([`default_path`]), whose folder is
/// created (readable by the user only) on first use. The second value says whether it
/// is that default.
pub(crate) fn url_or_default(url: Option<&str>) -> Result<(String, bool), Failure> {
    if let Some(url) = url.filter(|url| !url.trim().is_empty()) {
        return Ok((url.to_owned(), false));
    }
    let Some(path) = default_path() else {
        return Err(Failure::usage(
            "no store given and no state directory to keep the default one in (neither XDG_STATE_HOME nor \
             HOME is set): pass --store URL or set DISTLOCK_STORE",
        ));
    };
    if let Some(folder) = path.parent() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(folder).map_err(|error| {
            Failure::new(
                exit::UNAVAILABLE,
                format!("cannot create the default store's folder {}: {error}", folder.display()),
            )
        })?;
    }
    Ok((sqlite_url(&path), true))
}

/// Where the default store lives: `$XDG_STATE_HOME/distlock/locks.db`, else
/// `$HOME/.local/state/distlock/locks.db`; `None` when neither variable is set to an
/// absolute path.
pub(crate) fn default_path() -> Option<PathBuf> {
    let absolute = |name: &str| std::env::var_os(name).map(PathBuf::from).filter(|path| path.is_absolute());
    let state = absolute("XDG_STATE_HOME").or_else(|| absolute("HOME").map(|home| home.join(".local/state")))?;
    Some(state.join("distlock").join("locks.db"))
}

/// The `sqlite://` URL of a database file, with the characters a URL gives a meaning
/// to escaped.
fn sqlite_url(path: &std::path::Path) -> String {
    let mut url = String::from("sqlite://");
    for byte in path.as_os_str().as_encoded_bytes() {
        match byte {
            b'%' | b'?' | b'#' | b' ' | 0..=0x1f | 0x7f..=0xff => url.push_str(&format!("%{byte:02X}")),
            _ => url.push(char::from(*byte)),
        }
    }
    url
}

/// The line `--help` gives the default store.
pub(crate) fn default_help() -> String {
    match default_path() {
        Some(path) => format!(
            "Without --store or DISTLOCK_STORE: the embedded store, {} (locks shared by the processes of \
             this host, no server; created on first use).",
            sqlite_url(&path)
        ),
        None => "Without --store or DISTLOCK_STORE: the embedded store in $XDG_STATE_HOME or \
                 $HOME/.local/state (neither is set here)."
            .to_owned(),
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
             so no other process could see it or be excluded by it. Use a shared store: leave \
             --store out for this host's embedded store, or --store redis://HOST:6379"
        )));
    }
    Ok(())
}

/// Connects to the store at `url` (PostgreSQL: creating the lease table if needed).
pub(crate) async fn connect(url: &str) -> Result<Arc<DynLockStore>, Failure> {
    Ok(distlock::connect(url).await?)
}
