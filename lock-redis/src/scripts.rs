//! The Lua scripts the store runs, and how they are sent: `EVALSHA`, falling back to
//! `EVAL` when the server answers `NOSCRIPT` (after `SCRIPT FLUSH`, a restart or a failover).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use redis::aio::ConnectionManager;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, ServerErrorKind, Value};

/// The release script: delete the key only if it still holds the caller's token.
/// `KEYS[1]` = lock key, `ARGV[1]` = token. Returns 1 when deleted, 0 otherwise.
pub const RELEASE_SCRIPT: &str = r#"-- 释放锁：仅当 value 等于传入的 token 时才删除
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end
"#;

/// The extend script: reset the lease only if the key still holds the caller's token.
/// `KEYS[1]` = lock key, `ARGV[1]` = token, `ARGV[2]` = TTL in ms. Returns 1 or 0.
pub const EXTEND_SCRIPT: &str = r#"-- 续租：仅当 value 等于传入的 token 时才 PEXPIRE
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end
"#;

/// The fencing-mode acquire script: the plain acquire's `SET key token NX PX ttl` and, only if it
/// succeeded, the next number of the store's **one** fencing counter (`INCR`), recorded
/// for the new holder in a companion key that expires with the lease — one atomic step.
///
/// The counter is shared by every key of the prefix: it only ever grows, so the numbers
/// of any one key strictly increase too, and the store keeps one counter instead of one
/// per key. The companion key's value is `<fence>:<token>`.
/// `KEYS[1]` = lock key, `KEYS[2]` = counter, `KEYS[3]` = companion key,
/// `ARGV[1]` = token, `ARGV[2]` = TTL in ms.
/// Returns `{1, fence}` when acquired, `{0, pttl}` when held.
pub const FENCED_ACQUIRE_SCRIPT: &str = r#"-- 获取锁并发放 fencing 号（单个原子脚本）
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    local fence = redis.call("incr", KEYS[2])
    redis.call("set", KEYS[3], fence .. ":" .. ARGV[1], "PX", ARGV[2])
    return {1, fence}
end
return {0, redis.call("pttl", KEYS[1])}
"#;

/// The fencing-mode extend script: [`EXTEND_SCRIPT`]'s check (`GET` == token → `PEXPIRE`), also
/// moving the expiry of the holder's fence key, so the number lives as long as the lease.
/// `KEYS[1]` = lock key, `KEYS[2]` = the fence key of the lock,
/// `ARGV[1]` = token, `ARGV[2]` = TTL in ms. Returns 1 or 0.
pub const FENCED_EXTEND_SCRIPT: &str = r#"-- 续租（fencing 模式）：仅当 value 等于传入的 token 时才 PEXPIRE，fencing 号同步续期
if redis.call("get", KEYS[1]) == ARGV[1] then
    redis.call("pexpire", KEYS[2], ARGV[2])
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end
"#;

/// The inspect script: the current holder, `{token, pttl, fence-or-nil}`, or nil when the key is free.
/// `KEYS[1]` = lock key, optional `KEYS[2]` = the lock's fence key (fencing mode): its
/// number is reported only if it was issued to the current holder's token.
pub const INSPECT_SCRIPT: &str = r#"-- 查看当前持有者
local token = redis.call("get", KEYS[1])
if not token then
    return false
end
local pttl = redis.call("pttl", KEYS[1])
local fence = false
if KEYS[2] then
    local issued = redis.call("get", KEYS[2])
    if issued then
        local number, owner = string.match(issued, "^(%d+):(.+)$")
        if owner == token then
            fence = number
        end
    end
end
return {token, pttl, fence}
"#;

/// The list script: the holders of one page of lock keys found by `SCAN`, read in one
/// atomic step. `KEYS[1..n]` = lock keys, in fencing mode followed by `KEYS[n+1..2n]` =
/// their fence keys; `ARGV[1]` = n. Returns a flat array of three entries per lock key,
/// `token, pttl, fence`: the token nil (and the rest meaningless) for a key that is gone
/// or is not a lock this store could have written (not a string, not a token's length,
/// no expiry); the fence nil unless fencing mode issued one to this token.
///
/// `STRLEN` (called with `pcall`, as it fails on other types) guards the `GET`, so a big
/// value someone else stored under the namespace is never copied. About 2 µs per key on
/// the server.
pub const LIST_SCRIPT: &str = r#"-- 列出一页锁的持有者（只读）
local n = tonumber(ARGV[1])
local held = {}
for i = 1, n do
    local key = KEYS[i]
    local token, pttl, fence = false, -2, false
    local len = redis.pcall("strlen", key)
    if type(len) == "number" and len > 0 and len <= 64 then
        pttl = redis.call("pttl", key)
        if pttl > 0 then
            token = redis.call("get", key)
            if KEYS[n + i] then
                local issued = redis.call("get", KEYS[n + i])
                if issued then
                    local number, owner = string.match(issued, "^(%d+):(.+)$")
                    if owner == token then
                        fence = number
                    end
                end
            end
        end
    end
    held[3 * i - 2] = token
    held[3 * i - 1] = pttl
    held[3 * i] = fence
end
return held
"#;

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
        conn: &mut (impl redis::aio::ConnectionLike + Send),
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
        conn: &mut ConnectionManager,
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
        conn: &mut (impl redis::aio::ConnectionLike + Send),
        loaded: &Loaded,
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<T> {
        self.load_once(conn, loaded).await;
        self.run(conn, args).await
    }

    /// [`run_then`](Self::run_then), after a `SCRIPT LOAD` as [`run_loaded`](Self::run_loaded).
    pub(crate) async fn run_loaded_then<T: FromRedisValue>(
        &self,
        conn: &mut ConnectionManager,
        loaded: &Loaded,
        args: impl Fn(&mut Cmd),
        then: &Cmd,
    ) -> RedisResult<(T, RedisResult<Value>)> {
        self.load_once(conn, loaded).await;
        self.run_then(conn, args, then).await
    }

    /// `SCRIPT LOAD` of the script, unless `loaded` says it was sent already.
    async fn load_once(&self, conn: &mut (impl redis::aio::ConnectionLike + Send), loaded: &Loaded) {
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
    conn: &mut ConnectionManager,
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

/// The store's scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) release: LuaScript,
    pub(crate) extend: LuaScript,
    pub(crate) fenced_acquire: LuaScript,
    pub(crate) fenced_extend: LuaScript,
    pub(crate) inspect: LuaScript,
    pub(crate) list: LuaScript,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    release: LuaScript::new(RELEASE_SCRIPT),
    extend: LuaScript::new(EXTEND_SCRIPT),
    fenced_acquire: LuaScript::new(FENCED_ACQUIRE_SCRIPT),
    fenced_extend: LuaScript::new(FENCED_EXTEND_SCRIPT),
    inspect: LuaScript::new(INSPECT_SCRIPT),
    list: LuaScript::new(LIST_SCRIPT),
});

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
        for script in [
            &SCRIPTS.release,
            &SCRIPTS.extend,
            &SCRIPTS.fenced_acquire,
            &SCRIPTS.fenced_extend,
            &SCRIPTS.inspect,
            &SCRIPTS.list,
        ] {
            assert_eq!(script.sha().len(), 40);
            assert!(script.sha().bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_ne!(SCRIPTS.release.sha(), SCRIPTS.extend.sha());
    }
}
