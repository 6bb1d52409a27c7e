//! Restart-safe fencing numbers ([`clock_fences`](crate::RedisLockStoreBuilder::clock_fences)):
//! the store's fence-issuing scripts with their `INCR` of the fence counter replaced by
//! [`CLOCK_FENCE_FUNCTION`], which draws `max(counter + 1, server clock in µs)`.
//!
//! A server without persistence loses the counter when it restarts, and `INCR` starts
//! again at 1: a paused holder's stale write carrying an older, bigger number would then
//! beat the new holder's. Drawn from the clock, the first number after a restart is the
//! server's time in microseconds, greater than every number issued before the restart
//! as long as
//!
//! 1. the server's clock (`TIME`) does not go backwards across the restart (or, after a
//!    failover, the new master's clock is not behind the old one's by more than the
//!    failover took), and
//! 2. numbers were issued at most one per microsecond on average (Redis runs far fewer
//!    scripts than that), so the counter never ran ahead of the clock.
//!
//! The counter key and the holder's fence key keep their layout; only their values grow
//! to about 1.8 × 10¹⁵ (2026 in µs), exact in Lua's doubles (below 2⁵³). A counter that
//! already holds a bigger number keeps growing by one, so switching a store from counter
//! to clock fences (or back, before any restart) never makes numbers go backwards.

use std::sync::LazyLock;

use crate::group_scripts::GROUP_SCRIPTS;
use crate::queue_scripts::QUEUED_ACQUIRE_SCRIPT;
use crate::scripts::{LuaScript, FENCED_ACQUIRE_SCRIPT};

/// The Lua function the clock variants call instead of `INCR`: it reads the server's
/// clock (`TIME`, µs), stores `max(counter + 1, now)` in the counter and returns it as a
/// decimal string (Lua would print a number this big in exponent notation).
pub const CLOCK_FENCE_FUNCTION: &str = r#"-- fencing 号取自服务器时钟与计数器（重启后仍严格递增）
local function distlock_clock_fence(counter)
    local t = redis.call("TIME")
    local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local last = tonumber(redis.call("GET", counter) or "0") or 0
    local fence = string.format("%.0f", math.max(last + 1, now))
    redis.call("SET", counter, fence)
    return fence
end
"#;

/// `script` with its one `INCR` of the counter (`incr_call`, verbatim) replaced by a call
/// of [`CLOCK_FENCE_FUNCTION`]; `None` when `incr_call` does not occur exactly once.
pub(crate) fn clock_variant(script: &str, incr_call: &str, counter: &str) -> Option<String> {
    if script.matches(incr_call).count() != 1 {
        return None;
    }
    let replaced = script.replace(incr_call, &format!("distlock_clock_fence({counter})"));
    Some(format!("{CLOCK_FENCE_FUNCTION}{replaced}"))
}

/// The `INCR` calls the variants replace, as the scripts spell them.
const FENCED_INCR: (&str, &str) = (r#"redis.call("incr", KEYS[2])"#, "KEYS[2]");
const QUEUED_INCR: (&str, &str) = (r#"redis.call("incr", KEYS[4])"#, "KEYS[4]");
const GROUP_INCR: (&str, &str) = (r#"redis.call("INCR", KEYS[2])"#, "KEYS[2]");

/// The clock variants of the fence-issuing scripts, made once per process.
#[derive(Debug)]
pub(crate) struct ClockScripts {
    pub(crate) fenced_acquire: LuaScript,
    pub(crate) queued_acquire: LuaScript,
    pub(crate) group_acquire: LuaScript,
}

fn leaked_variant(script: &str, (incr, counter): (&str, &str)) -> &'static str {
    // A script that lost its `INCR` would silently issue no fence: the unit test below
    // fails first. Falling back to the script itself keeps library code panic-free.
    let code = clock_variant(script, incr, counter).unwrap_or_else(|| script.to_owned());
    // Made once per process (a `LazyLock`), so the three strings are the only leak.
    Box::leak(code.into_boxed_str())
}

pub(crate) static CLOCK_SCRIPTS: LazyLock<ClockScripts> = LazyLock::new(|| ClockScripts {
    fenced_acquire: LuaScript::new(leaked_variant(FENCED_ACQUIRE_SCRIPT, FENCED_INCR)),
    queued_acquire: LuaScript::new(leaked_variant(QUEUED_ACQUIRE_SCRIPT, QUEUED_INCR)),
    group_acquire: LuaScript::new(leaked_variant(GROUP_SCRIPTS.acquire.code(), GROUP_INCR)),
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fence_issuing_script_has_exactly_one_incr_to_replace() {
        for (script, (incr, counter)) in [
            (FENCED_ACQUIRE_SCRIPT, FENCED_INCR),
            (QUEUED_ACQUIRE_SCRIPT, QUEUED_INCR),
            (GROUP_SCRIPTS.acquire.code(), GROUP_INCR),
        ] {
            let variant = clock_variant(script, incr, counter).expect("the script's INCR moved: update clock_fence.rs");
            assert!(!variant.to_ascii_lowercase().contains("\"incr\""), "{variant}");
            assert!(variant.contains(&format!("distlock_clock_fence({counter})")));
        }
        assert_ne!(CLOCK_SCRIPTS.fenced_acquire.sha(), CLOCK_SCRIPTS.queued_acquire.sha());
    }
}
