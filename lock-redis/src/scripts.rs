//! The Lua scripts the store runs, and how they are sent: `EVALSHA`, falling back to
//! `EVAL` when the server answers `NOSCRIPT` (seed 000, constraint 9).

use std::sync::LazyLock;

use redis::aio::ConnectionManager;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind};

/// The release script: seed 000 §3.2, verbatim: delete the key only if it still holds the caller's token.
/// `KEYS[1]` = lock key, `ARGV[1]` = token. Returns 1 when deleted, 0 otherwise.
pub const RELEASE_SCRIPT: &str = r#"-- 释放锁：仅当 value 等于传入的 token 时才删除
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end
"#;

/// The extend script, seed 000 §3.3: reset the lease only if the key still holds the caller's token.
/// `KEYS[1]` = lock key, `ARGV[1]` = token, `ARGV[2]` = TTL in ms. Returns 1 or 0.
pub const EXTEND_SCRIPT: &str = r#"-- 续租：仅当 value 等于传入的 token 时才 PEXPIRE
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("pexpire", KEYS[1], ARGV[2])
else
    return 0
end
"#;

/// The fencing-mode acquire script: the spec's `SET key token NX PX ttl`, and on success the next
/// number of the key's fencing counter, in one atomic step. The counter lives in a hash
/// (`fence` = last number handed out, `token` = who got it) that is never deleted.
/// `KEYS[1]` = lock key, `KEYS[2]` = fence key, `ARGV[1]` = token, `ARGV[2]` = TTL in ms.
/// Returns `{1, fence}` when acquired, `{0, pttl}` when held.
pub const FENCED_ACQUIRE_SCRIPT: &str = r#"-- 获取锁并发放 fencing 号（单个原子脚本）
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    local fence = redis.call("hincrby", KEYS[2], "fence", 1)
    redis.call("hset", KEYS[2], "token", ARGV[1])
    return {1, fence}
end
return {0, redis.call("pttl", KEYS[1])}
"#;

/// The inspect script: the current holder, `{token, pttl, fence-or-nil}`, or nil when the key is free.
/// `KEYS[1]` = lock key, optional `KEYS[2]` = fence key (fencing mode): its number is
/// reported only if it was handed to the current holder's token.
pub const INSPECT_SCRIPT: &str = r#"-- 查看当前持有者
local token = redis.call("get", KEYS[1])
if not token then
    return false
end
local pttl = redis.call("pttl", KEYS[1])
local fence = false
if KEYS[2] then
    local issued = redis.call("hmget", KEYS[2], "fence", "token")
    if issued[2] == token then
        fence = issued[1]
    end
end
return {token, pttl, fence}
"#;

/// A Lua script and its SHA1, computed once.
#[derive(Debug)]
pub(crate) struct LuaScript {
    code: &'static str,
    sha: String,
}

impl LuaScript {
    fn new(code: &'static str) -> Self {
        Self { code, sha: redis::Script::new(code).get_hash().to_owned() }
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
        conn: &mut ConnectionManager,
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<T> {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(&self.sha);
        args(&mut evalsha);
        match evalsha.query_async(conn).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                tracing::debug!(sha = %self.sha, "NOSCRIPT: falling back to EVAL");
                let mut eval = redis::cmd("EVAL");
                eval.arg(self.code);
                args(&mut eval);
                eval.query_async(conn).await
            }
            result => result,
        }
    }
}

/// The store's scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) release: LuaScript,
    pub(crate) extend: LuaScript,
    pub(crate) fenced_acquire: LuaScript,
    pub(crate) inspect: LuaScript,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    release: LuaScript::new(RELEASE_SCRIPT),
    extend: LuaScript::new(EXTEND_SCRIPT),
    fenced_acquire: LuaScript::new(FENCED_ACQUIRE_SCRIPT),
    inspect: LuaScript::new(INSPECT_SCRIPT),
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

    #[test]
    fn shas_are_sha1_hex() {
        for script in [&SCRIPTS.release, &SCRIPTS.extend, &SCRIPTS.fenced_acquire, &SCRIPTS.inspect] {
            assert_eq!(script.sha().len(), 40);
            assert!(script.sha().bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_ne!(SCRIPTS.release.sha(), SCRIPTS.extend.sha());
    }
}
