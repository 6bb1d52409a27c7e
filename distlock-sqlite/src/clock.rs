//! The store's clock: milliseconds of `CLOCK_BOOTTIME`, tagged with the boot they belong
//! to. A leaf: imports nothing from the rest of the crate.
//!
//! Every process on the host reads the same `CLOCK_BOOTTIME`: it starts at zero at boot,
//! never steps (setting the wall clock, NTP steps and slews of `CLOCK_REALTIME` leave it
//! alone) and, unlike `CLOCK_MONOTONIC`, keeps counting while the machine is suspended,
//! so a lease lasts its TTL in real elapsed time even across a laptop's sleep. Its values
//! mean nothing after a reboot, so every stored instant carries the boot id
//! (`/proc/sys/kernel/random/boot_id`) and an instant of another boot is in the past.

use std::sync::OnceLock;
use std::time::Duration;

use rustix::time::{clock_gettime, ClockId};

/// Where the kernel publishes the id of the current boot (a random UUID per boot).
pub(crate) const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// The current boot's id, read once per process.
///
/// # Errors
///
/// The I/O error when the file cannot be read (not Linux, or `/proc` not mounted).
pub(crate) fn boot_id() -> Result<&'static str, std::io::Error> {
    static BOOT: OnceLock<String> = OnceLock::new();
    if let Some(boot) = BOOT.get() {
        return Ok(boot);
    }
    let text = std::fs::read_to_string(BOOT_ID_PATH)?;
    Ok(BOOT.get_or_init(|| text.trim().to_owned()))
}

/// The time since boot on `CLOCK_BOOTTIME`.
pub(crate) fn since_boot() -> Duration {
    let now = clock_gettime(ClockId::Boottime);
    Duration::new(u64::try_from(now.tv_sec).unwrap_or(0), u32::try_from(now.tv_nsec).unwrap_or(0))
}

/// [`since_boot`] in whole milliseconds, as stored.
pub(crate) fn now_ms() -> i64 {
    i64::try_from(since_boot().as_millis()).unwrap_or(i64::MAX)
}

/// The instant `after` from `now_ms`, in stored milliseconds (saturating).
pub(crate) fn ms_after(now_ms: i64, after: Duration) -> i64 {
    now_ms.saturating_add(i64::try_from(after.as_millis()).unwrap_or(i64::MAX))
}

/// The time from `now_ms` to `until_ms` (zero when it is past).
pub(crate) fn left(now_ms: i64, until_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(until_ms.saturating_sub(now_ms)).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_advances_with_time_not_the_wall_clock() {
        let before = since_boot();
        std::thread::sleep(Duration::from_millis(20));
        let elapsed = since_boot() - before;
        assert!(elapsed >= Duration::from_millis(20) && elapsed < Duration::from_secs(5), "{elapsed:?}");
        // The boot clock counts from boot, far below the wall clock's seconds since 1970.
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        assert!(since_boot() < wall / 2, "{:?} vs {wall:?}", since_boot());
    }

    #[test]
    fn the_boot_id_is_a_uuid() {
        let boot = boot_id().unwrap();
        assert_eq!(boot.len(), 36, "{boot}");
        assert_eq!(boot_id().unwrap(), boot);
    }

    #[test]
    fn instants_saturate() {
        assert_eq!(ms_after(5, Duration::from_millis(10)), 15);
        assert_eq!(ms_after(i64::MAX - 1, Duration::from_secs(1)), i64::MAX);
        assert_eq!(left(10, 5), Duration::ZERO);
        assert_eq!(left(5, 10), Duration::from_millis(5));
    }
}
