//! The Lua scripts the stores run, one file each in `src/lua/` (variants are separate files
//! or arguments), and how they are sent:
//! `EVALSHA`, falling back to `EVAL` when the server answers `NOSCRIPT` (after `SCRIPT
//! FLUSH`, a restart or a failover).
//!
//! Lua shared by several scripts (helper functions, constants) is written once, in a file
//! of `src/lua/lib/`; a script that uses it is that file's text followed by its own, joined
//! at compile time (`concat!` of `include_str!`s): the `&'static str` the server runs,
//! with no rewriting at run time. `release.lua` and `extend.lua` stay whole on their own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, ServerErrorKind, Value};

/// The release script: delete the key only if it still holds the caller's token, the
/// specification's compare-and-delete byte for byte (SHA-1
/// `1ba2f9e56bb45f8f43d57b282bfe8c31bcf2a2e2`), public so that a client or benchmark
/// without this crate's store can send the same script.
/// `KEYS[1]` = lock key, `ARGV[1]` = token. Returns 1 when deleted, 0 otherwise.
pub const RELEASE_SCRIPT: &str = include_str!("lua/release.lua");

/// A Lua script and its SHA1, computed once.
#[derive(Debug)]
pub(crate) struct LuaScript {
    code: &'static str,
    sha: String,
}

impl LuaScript {
    pub(crate) fn new(code: &'static str) -> Self {
        Self { code, sha: redis::Script::new(code).get_hash().to_owned() }
    }

    /// The script's source, as `EVAL` takes it.
    #[cfg(test)]
    pub(crate) fn code(&self) -> &'static str {
        self.code
    }

    /// The script's SHA1, as `EVALSHA` takes it.
    #[cfg(test)]
    pub(crate) fn sha(&self) -> &str {
        &self.sha
    }

    /// Runs the script with `EVALSHA`; when the server does not know it (`NOSCRIPT`:
    /// after `SCRIPT FLUSH`, a restart or a failover) sends it once with `EVAL`, which
    /// also caches it for the next `EVALSHA`.
    ///
    /// `args` appends `numkeys`, the keys and the arguments. A `NOSCRIPT` reply means the
    /// script did not run, so the fallback never runs it twice. No other error is retried.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<T> {
        let mut evalsha = script_cmd("EVALSHA", &self.sha);
        args(&mut evalsha);
        match evalsha.query_async(conn).await {
            Err(err) if is_noscript(&err) => {
                tracing::debug!(sha = %self.sha, "NOSCRIPT: falling back to EVAL");
                let mut eval = script_cmd("EVAL", self.code);
                args(&mut eval);
                eval.query_async(conn).await
            }
            result => result,
        }
    }

    /// [`run`](Self::run), with `then` pipelined right behind the script: both are written
    /// together and answered in one round trip, and the server runs `then` after the
    /// script. `then`'s own reply is returned beside the script's, never as an error of
    /// the script; on `NOSCRIPT` both are sent again (`EVAL` + `then`).
    pub(crate) async fn run_then<T: FromRedisValue>(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        args: impl Fn(&mut Cmd),
        then: &Cmd,
    ) -> RedisResult<(T, RedisResult<Value>)> {
        let mut evalsha = script_cmd("EVALSHA", &self.sha);
        args(&mut evalsha);
        match pipelined::<T>(conn, evalsha, then).await? {
            (Err(err), _) if is_noscript(&err) => {
                tracing::debug!(sha = %self.sha, "NOSCRIPT: falling back to EVAL");
                let mut eval = script_cmd("EVAL", self.code);
                args(&mut eval);
                let (script, then) = pipelined::<T>(conn, eval, then).await?;
                Ok((script?, then))
            }
            (script, then) => Ok((script?, then)),
        }
    }
}

/// Whether a store has sent `SCRIPT LOAD` for one of its scripts (the first run loads it,
/// later runs go straight to `EVALSHA`). One per script per store; clones of a store
/// share it.
#[derive(Debug, Default)]
pub(crate) struct Loaded(AtomicBool);

impl LuaScript {
    /// [`run`](Self::run), after a `SCRIPT LOAD` of the script when `loaded` says this
    /// store has not loaded it yet: `SCRIPT LOAD` first, then `EVALSHA`, and `EVAL` when
    /// the server answers `NOSCRIPT` (it lost its scripts: a restart, a failover, `SCRIPT
    /// FLUSH`). A failed `SCRIPT LOAD` is not an error of its own: `EVALSHA` and its
    /// fallback decide.
    pub(crate) async fn run_loaded<T: FromRedisValue>(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        loaded: &Loaded,
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<T> {
        self.load_once(conn, loaded).await;
        self.run(conn, args).await
    }

    /// [`run_then`](Self::run_then), after a `SCRIPT LOAD` as [`run_loaded`](Self::run_loaded).
    pub(crate) async fn run_loaded_then<T: FromRedisValue>(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        loaded: &Loaded,
        args: impl Fn(&mut Cmd),
        then: &Cmd,
    ) -> RedisResult<(T, RedisResult<Value>)> {
        self.load_once(conn, loaded).await;
        self.run_then(conn, args, then).await
    }

    /// `SCRIPT LOAD` of the script, unless `loaded` says it was sent already.
    async fn load_once(&self, conn: &mut (impl ConnectionLike + Send), loaded: &Loaded) {
        if loaded.0.load(Ordering::Acquire) {
            return;
        }
        let reply: RedisResult<String> = redis::cmd("SCRIPT").arg("LOAD").arg(self.code).query_async(conn).await;
        match reply {
            Ok(_) => loaded.0.store(true, Ordering::Release),
            Err(err) => tracing::debug!(
                sha = %self.sha,
                error = &err as &dyn std::error::Error,
                "SCRIPT LOAD failed; EVALSHA falls back to EVAL"
            ),
        }
    }
}

fn is_noscript(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// `EVALSHA <sha>` or `EVAL <code>`, its buffers sized for a script call's usual keys
/// and arguments, so that adding them does not grow them step by step (that growing was
/// a sixth of the client's work in a lock-group cycle).
fn script_cmd(command: &str, script: &str) -> Cmd {
    let mut cmd = Cmd::with_capacity(12, 256 + script.len());
    cmd.arg(command).arg(script);
    cmd
}

/// Sends `first` and `then` in one pipeline; a connection error fails the whole call, a
/// server error fails only the command it answers.
async fn pipelined<T: FromRedisValue>(
    conn: &mut (impl ConnectionLike + Send),
    first: Cmd,
    then: &Cmd,
) -> RedisResult<(RedisResult<T>, RedisResult<Value>)> {
    let mut pipe = redis::pipe();
    pipe.add_command(first).add_command(then.clone()).ignore_errors();
    let mut replies: Vec<RedisResult<Value>> = pipe.query_async(conn).await?;
    let (Some(then), Some(first), None) = (replies.pop(), replies.pop(), replies.pop()) else {
        return Err(RedisError::from((ErrorKind::Client, "a pipeline of two commands did not get two replies")));
    };
    Ok((first.and_then(|value| Ok(T::from_redis_value(value)?)), then))
}

/// The fencing argument of [`Scripts::queued_acquire`]: `0` none, `1` the counter's
/// `INCR`, `c` a clock fence.
pub(crate) fn fence_flag(fencing: bool, clock_fences: bool) -> &'static str {
    match (fencing, clock_fences) {
        (false, _) => "0",
        (true, false) => "1",
        (true, true) => "c",
    }
}

/// Declares the crate's scripts in one list: a field of [`Scripts`] per file of `src/lua/`,
/// preceded by the `src/lua/lib/` files whose helpers it uses (`["lib/x.lua",
/// "script.lua"]`); the files are joined at compile time into exactly the text the server
/// runs. For the tests: the list of scripts and of the files each is made of.
macro_rules! scripts {
    ($($(#[$doc:meta])* $name:ident: [$($file:literal),+],)*) => {
        /// Every Lua script of the crate, hashed once per process.
        #[derive(Debug)]
        pub(crate) struct Scripts {
            $($(#[$doc])* pub(crate) $name: LuaScript,)*
        }

        pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
            $($name: LuaScript::new(concat!($(include_str!(concat!("lua/", $file))),+)),)*
        });

        /// Every script, by name: the files it is made of (libraries first, each with its
        /// text) and the text the server runs.
        #[cfg(test)]
        pub(crate) const FILES: &[(&str, &[(&str, &str)], &str)] = &[$((
            stringify!($name),
            &[$(($file, include_str!(concat!("lua/", $file)))),+],
            concat!($(include_str!(concat!("lua/", $file))),+),
        ),)*];
    };
}

scripts! {
    /// [`RELEASE_SCRIPT`].
    release: ["release.lua"],
    /// Resets the lease only if the key still holds the caller's token.
    /// `KEYS[1]` = lock key, `ARGV[1]` = token, `ARGV[2]` = TTL in ms. Returns 1 or 0.
    extend: ["extend.lua"],
    /// The fencing-mode acquire: the plain acquire's `SET key token NX PX ttl` and, only if
    /// it succeeded, the next number of the store's **one** fencing counter (`INCR`: it only
    /// grows, so the numbers of any one key strictly increase too), recorded for the new
    /// holder in a companion key (`<fence>:<token>`) that expires with the lease.
    /// `KEYS` = lock key, counter, companion key; `ARGV` = token, TTL in ms.
    /// Returns `{1, fence}` when acquired, `{0, pttl}` when held.
    fenced_acquire: ["fenced_acquire.lua"],
    /// [`fenced_acquire`](Self::fenced_acquire) with restart-safe fences
    /// ([`clock_fences`](crate::RedisLockStoreBuilder::clock_fences)): `max(counter + 1,
    /// server clock in µs)` instead of `INCR`; `lib/clock_fence.lua` explains when that holds.
    fenced_acquire_clock: ["lib/clock_fence.lua", "fenced_acquire_clock.lua"],
    /// The fencing-mode extend: [`extend`](Self::extend)'s check, also moving the expiry
    /// of the holder's fence key. `KEYS` = lock key, fence key; `ARGV` = token, TTL in ms.
    /// Returns 1 or 0.
    fenced_extend: ["fenced_extend.lua"],
    /// The current holder, `{token, pttl, fence-or-nil}`, or nil when the key is free.
    /// `KEYS[1]` = lock key, optional `KEYS[2]` = the lock's fence key (fencing mode): its
    /// number is reported only if it was issued to the current holder's token.
    inspect: ["lib/fence.lua", "inspect.lua"],
    /// The holders of one page of lock keys found by `SCAN`, read in one atomic step.
    /// `KEYS[1..n]` = lock keys, in fencing mode followed by `KEYS[n+1..2n]` = their fence
    /// keys; `ARGV[1]` = n. Returns `token, pttl, fence` per lock key: the token nil for a
    /// key that is gone or is not a lock this store could have written (not a string, not
    /// a token's length, no expiry); the fence nil unless fencing mode issued one to this
    /// token. `STRLEN` (with `pcall`) guards the `GET`, so a big value someone else stored
    /// under the namespace is never copied. About 2 µs per key on the server.
    list: ["lib/fence.lua", "list.lua"],
    /// Attaches a value to the lease the caller's token holds: `GET` of the lock key ==
    /// token, then `SET` of the lock's value key to `<token>:<value>` (no expiry).
    /// `KEYS` = lock key, value key; `ARGV` = token, value. Returns 1 or 0.
    set_value: ["set_value.lua"],
    /// The current holder with its lease's value, `{token, pttl, fence-or-nil,
    /// value-or-nil}`, or nil when the key is free: the value only when the value key was
    /// written for the holder's token; a value key of any other token is deleted.
    /// `KEYS` = lock key, value key, optional fence key (fencing mode), as in
    /// [`inspect`](Self::inspect).
    inspect_value: ["lib/fence.lua", "inspect_value.lua"],
    /// The fair release: the compare-and-delete of [`RELEASE_SCRIPT`], then, only when the
    /// key has a queue, the token's place leaves it and a free key is handed to the oldest
    /// live waiter (see `queued_acquire.lua` for the queue's keys). Publishes the release
    /// (and any hand-over).
    fair_release: ["lib/queue.lua", "fair_release.lua"],
    /// A queued waiter's attempt, one atomic step: the key is taken when it was handed to
    /// the token, or is free and the token is first in line (or nobody waits); a free key
    /// whose first waiter is someone else is handed to that waiter; otherwise the token's
    /// place is taken (arrival order) or refreshed.
    queued_acquire: ["lib/queue.lua", "lib/clock_fence.lua", "queued_acquire.lua"],
    /// How many live places a key's queue has, read only. `KEYS` = queue-ttl.
    queue_len: ["lib/queue.lua", "queue_len.lua"],
    /// The live places of a key's queue in arrival order, with their expiries and
    /// arrivals, read only. `KEYS` = queue, queue-ttl.
    queue_places: ["lib/queue.lua", "queue_places.lua"],
    /// A lock group's atomic attempt at every member, or a probe that grants nothing (a
    /// waiting caller's marks the name that blocks it; see `commands/group.rs` for the key
    /// layout and the file for the arguments).
    group_acquire: ["lib/group.lua", "lib/clock_fence.lua", "group_acquire.lua"],
    /// Extends every member still held by the token, and the group's lease key.
    group_extend: ["lib/group.lua", "group_extend.lua"],
    /// Removes the token's holds and places from every name and publishes the change when
    /// a name is marked by a waiting group or has places.
    group_release: ["lib/group.lua", "group_release.lua"],
    /// Removes a waiting group's places.
    group_withdraw: ["lib/group.lua", "group_withdraw.lua"],
    /// The live holders of one name, read only.
    group_holders: ["lib/group.lua", "lib/group_read.lua", "group_holders.lua"],
    /// How many live places of waiting groups one name has, read only.
    group_waiting: ["lib/group.lua", "group_waiting.lua"],
    /// The live places of waiting groups on one name, with their tickets, read only.
    group_places: ["lib/group.lua", "lib/group_read.lua", "group_places.lua"],
    /// The live holders and places of a page of names (found by `SCAN`), read only.
    group_list: ["lib/group.lua", "lib/group_read.lua", "group_list.lua"],
    /// The release of a fencing Redlock master: the compare-and-delete, which also raises
    /// the master's fence counter to the number the whole quorum granted (`ARGV[2]`).
    /// `KEYS` = lock key, fence counter; `ARGV` = token, fence.
    redlock_release: ["redlock_release.lua"],
    /// Stores a value in a hash's `value` field only if the fence it carries is not lower
    /// than the hash's `fence` field, then stores that fence ([`fenced_set`](crate::fenced_set)).
    fenced_set: ["fenced_set.lua"],
    /// Claims an idempotency record, or reports what holds it (see `idempotency.rs`).
    idempotency_claim: ["idempotency_claim.lua"],
    /// Turns the token's running idempotency claim into a completed record.
    idempotency_complete: ["idempotency_complete.lua"],
    /// Resets the lease of the token's running idempotency claim.
    idempotency_renew: ["idempotency_renew.lua"],
    /// Deletes the token's running idempotency claim.
    idempotency_abandon: ["idempotency_abandon.lua"],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_is_seed_000_section_3_2_verbatim() {
        let body: Vec<&str> = RELEASE_SCRIPT.lines().skip(1).map(str::trim).collect();
        assert_eq!(
            body,
            [
                r#"if redis.call("get", KEYS[1]) == ARGV[1] then"#,
                r#"return redis.call("del", KEYS[1])"#,
                "else",
                "return 0",
                "end",
            ]
        );
    }

    /// The release script is the specification's text byte for byte (its comment line
    /// and final newline included), so every client that loads it gets this SHA-1.
    #[test]
    fn release_script_sha_is_pinned() {
        assert_eq!(SCRIPTS.release.sha(), "1ba2f9e56bb45f8f43d57b282bfe8c31bcf2a2e2");
    }

    #[test]
    fn shas_are_sha1_hex() {
        for (_, _, code) in FILES {
            let script = LuaScript::new(code);
            assert_eq!(script.sha().len(), 40);
            assert!(script.sha().bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_ne!(SCRIPTS.release.sha(), SCRIPTS.extend.sha());
    }

    /// The fair release starts with the release script's compare-and-delete, unchanged.
    #[test]
    fn the_fair_release_begins_with_the_seed_check() {
        let seed_check = RELEASE_SCRIPT.lines().nth(1).unwrap_or_default();
        let body = SCRIPTS.fair_release.code().split("\nlocal released = 0\n").nth(1).unwrap_or_default();
        assert_eq!(body.lines().next(), Some(seed_check));
        assert!(body.contains(r#"released = redis.call("del", KEYS[1])"#));
    }

    /// `release.lua` and `extend.lua` are whole on their own, and every script is its files
    /// joined, libraries first (a Lua `local` is visible only after its definition).
    #[test]
    fn scripts_are_their_files_joined() {
        for (name, files, code) in FILES {
            let joined: String = files.iter().map(|(_, text)| *text).collect();
            assert_eq!(&joined, code, "{name}");
            let (script, libs) = files.split_last().expect("a script has a file");
            assert!(!script.0.starts_with("lib/"), "{name}: its own file comes last");
            assert!(libs.iter().all(|(file, _)| file.starts_with("lib/")), "{name}: {libs:?}");
        }
        assert_eq!(SCRIPTS.release.code(), include_str!("lua/release.lua"));
        assert_eq!(SCRIPTS.extend.code(), include_str!("lua/extend.lua"));
    }

    /// The names a chunk declares with a `local` statement (`local a, b = …`, `local
    /// function f(…)`): at any depth, or only at its top level (lines not indented).
    fn locals(code: &str, top_level: bool) -> Vec<&str> {
        code.lines()
            .filter_map(
                |line| if top_level { line.strip_prefix("local ") } else { line.trim_start().strip_prefix("local ") },
            )
            .flat_map(|rest| {
                let rest = rest.strip_prefix("function ").unwrap_or(rest);
                let end = rest.find(['=', '(']).unwrap_or(rest.len());
                rest[..end].split(',').map(str::trim).filter(|name| !name.is_empty())
            })
            .collect()
    }

    /// No script declares again a name its libraries define (it would hide the helper), and
    /// no two libraries of one script define the same name.
    #[test]
    fn scripts_do_not_shadow_their_libraries() {
        for (name, files, _) in FILES {
            let (script, libs) = files.split_last().expect("a script has a file");
            let mut defined: Vec<&str> = Vec::new();
            for (file, text) in libs {
                for local in locals(text, true) {
                    assert!(!defined.contains(&local), "{name}: {file} defines `{local}` again");
                    defined.push(local);
                }
            }
            for local in locals(script.1, false) {
                assert!(!defined.contains(&local), "{name}: {} hides the library's `{local}`", script.0);
            }
        }
        assert_eq!(locals("local a, b = 1\n    local function f(x)\n", false), ["a", "b", "f"]);
        assert_eq!(locals("local a, b = 1\n    local function f(x)\n", true), ["a", "b"]);
    }

    /// Every file of `src/lua/` and `src/lua/lib/` is part of a script of [`Scripts`] (no
    /// orphan), every library compiles alone, and every script compiles on a real server:
    /// `SCRIPT LOAD` answers its SHA-1.
    #[test]
    fn every_lua_file_is_used_and_loads() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lua");
        let mut on_disk: Vec<String> = Vec::new();
        for (dir, prefix) in [(root.to_owned(), ""), (format!("{root}/lib"), "lib/")] {
            for entry in std::fs::read_dir(&dir).expect("src/lua") {
                let entry = entry.expect("src/lua entry");
                if entry.file_type().expect("file type").is_file() {
                    on_disk.push(format!("{prefix}{}", entry.file_name().to_string_lossy()));
                }
            }
        }
        on_disk.sort();
        let mut used: Vec<String> =
            FILES.iter().flat_map(|(_, files, _)| files.iter().map(|(file, _)| (*file).to_owned())).collect();
        used.sort();
        used.dedup();
        assert_eq!(on_disk, used, "every file in src/lua and src/lua/lib is used in `scripts!`, and only those");
        let mut scripts: Vec<&str> = FILES.iter().map(|(_, files, _)| files[files.len() - 1].0).collect();
        scripts.sort_unstable();
        scripts.dedup();
        assert_eq!(scripts.len(), FILES.len(), "each script file is one script");

        let Some(server) = distlock_conformance::kit::redis_server::RedisServer::start_or_skip("Lua scripts") else {
            return;
        };
        let libs = FILES.iter().flat_map(|(_, files, _)| files.iter()).filter(|(file, _)| file.starts_with("lib/"));
        for (file, code) in libs {
            let reply = server.try_command(&["SCRIPT", "LOAD", code]).expect("SCRIPT LOAD");
            assert_eq!(reply.as_text(), Some(LuaScript::new(code).sha().to_owned()), "{file}: {reply:?}");
        }
        for (name, _, code) in FILES {
            let reply = server.try_command(&["SCRIPT", "LOAD", code]).expect("SCRIPT LOAD");
            assert_eq!(reply.as_text(), Some(LuaScript::new(code).sha().to_owned()), "{name}: {reply:?}");
        }
    }
}
