//! The `#[distlock::lock(…)]` attribute: run an `async fn` under a distributed lock; and
//! `#[derive(Versioned)]`, versioned updates of a row through `distlock_optimistic`.
//!
//! Use it through the `distlock` crate (feature `macros`) as `#[distlock::lock(…)]`; the
//! code it generates refers to `::distlock`. The guide, with examples, is in the
//! `distlock` crate's documentation.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use proc_macro::TokenStream;

mod args;
mod expand;
mod template;
mod versioned;

/// Runs the `async fn` under a distributed lock, taken in one attempt by default.
///
/// ```text
/// #[distlock::lock(key = "order:{order_id}", ttl = "15s", wait = "0s", retry = "50ms", manager = self.locks)]
/// async fn pay(&self, order_id: u64) -> Result<Receipt, AppError> { … }
/// ```
///
/// | argument | meaning |
/// |---|---|
/// | `key = "…"` (required) | the lock key; `{name}` is replaced by the parameter `name` (formatted with `Display`), `{{` / `}}` are literal braces; no expressions |
/// | `ttl = "15s"` | the lease, a humantime duration checked at compile time (default 10 s) |
/// | `wait = "0s"` | how long to wait for a held lock (default 0: try once) |
/// | `retry = "50ms"` | the longest pause between attempts while waiting (default 50 ms) |
/// | `renew` / `renew = "5s"` | renew the lease in the background (every `max(1 s, min(10 s, TTL / 3))`, or at the interval, which must be at least 10 ms and shorter than four fifths of the TTL); a lost lease stops the body with `LockError::LeaseLost` |
/// | `reentrant` | run the function in a reentrant scope (`distlock::reentrant_scope`): a locked function called from a locked function on the same key shares the caller's lock instead of deadlocking on it; off by default |
/// | `read` / `write` | take a read (shared) or write (exclusive) lock on the key (`distlock::LockGroup`) instead of a plain lock: readers run together, a writer alone, and a waiting writer holds back new readers |
/// | `manager = expr` (required) | an expression giving a `LockManager` or a reference to one: `self.locks`, `state.locks`, `LOCKS` |
///
/// The function must return `Result<T, E>` with `E: From<distlock::LockError>`. When the
/// lock is not acquired the body does not run and the function returns
/// `E::from(LockError::NotAcquired { key })`; once acquired, the lock is released (token
/// checked) whether the body returns `Ok`, returns `Err` or panics, and the body's own
/// result is returned unchanged.
#[proc_macro_attribute]
pub fn lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match expand::lock(attr.into(), item.clone()) {
        Ok(expanded) => expanded.into(),
        // The function as written stays, so its callers do not add errors of their own.
        Err(error) => {
            let mut output = error.into_compile_error();
            output.extend(item);
            output.into()
        }
    }
}

/// Optimistic-locking methods for a struct that mirrors (part of) a row.
///
/// ```text
/// #[derive(distlock_optimistic::Versioned)]
/// #[versioned(table = "posts", key = "id")]   // also: schema = "app", crate = "distlock::optimistic"
/// struct PostPatch {
///     id: i64,
///     title: Option<String>, // None: left out of the update
///     body: String,
///     #[versioned(version)]
///     version: i32,          // i16, i32 or i64
///     #[versioned(skip)]
///     cached: bool,
/// }
/// ```
///
/// generates `versioned_update(&self) -> VersionedUpdate` and `update_by_id`,
/// `update_by_id_returning`, `update_by_id_force` and `update_by_id_force_returning`, each
/// taking any sqlx PostgreSQL executor. `key` defaults to `id`; columns are the field
/// names. The generated code refers to `::distlock_optimistic` unless `crate = "…"` names
/// another path (e.g. `distlock::optimistic`). Compile errors: no `table`, no key field,
/// no or two version fields, a version field that is not `i16`, `i32` or `i64`.
#[proc_macro_derive(Versioned, attributes(versioned))]
pub fn derive_versioned(item: TokenStream) -> TokenStream {
    match syn::parse(item).and_then(versioned::derive) {
        Ok(expanded) => expanded.into(),
        Err(error) => error.into_compile_error().into(),
    }
}
