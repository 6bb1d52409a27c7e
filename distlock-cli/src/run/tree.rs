//! The processes a command started, found and signalled as a whole.
//!
//! The keeper is a child subreaper (Linux): whatever the command starts stays its
//! descendant, even after a double fork or `setsid` — an orphan is re-parented to the
//! keeper, not to init. So "the command tree" is every descendant of the keeper, found in
//! `/proc`, plus the command's process group. Elsewhere only the process group is known.

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// The command's tree, seen from the keeper.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tree {
    /// The keeper: every process below it belongs to the command.
    root: Pid,
    /// The command's process group (its pid).
    group: Pid,
}

impl Tree {
    pub(super) fn new(root: Pid, group: Pid) -> Self {
        Self { root, group }
    }

    /// Sends `signal` to the process group and to every descendant of the keeper;
    /// returns how many descendants there were.
    pub(super) fn signal(&self, signal: Signal) -> usize {
        if let Err(error) = killpg(self.group, signal) {
            if error != Errno::ESRCH {
                eprintln!("distlock: cannot send {} to the command's process group: {error}", signal.as_str());
            }
        }
        let members = descendants(self.root);
        for pid in &members {
            // Gone in the meantime is fine; a process that is not ours cannot be signalled.
            let _ = kill(*pid, signal);
        }
        members.len()
    }

    /// SIGTERM to the tree, and SIGCONT so that stopped processes act on it (as systemd
    /// does); returns how many descendants there were.
    pub(super) fn terminate(&self) -> usize {
        let count = self.signal(Signal::SIGTERM);
        self.signal(Signal::SIGCONT);
        count
    }

    /// How many processes are left: the keeper's descendants, or at least 1 while the
    /// process group still has a member.
    pub(super) fn count(&self) -> usize {
        let members = descendants(self.root).len();
        if members == 0 && self.group_alive() {
            return 1;
        }
        members
    }

    /// Whether the process group still has a member (a zombie counts until reaped).
    pub(super) fn group_alive(&self) -> bool {
        killpg(self.group, None).is_ok()
    }
}

/// Every descendant of `root`, from `/proc`.
#[cfg(target_os = "linux")]
pub(super) fn descendants(root: Pid) -> Vec<Pid> {
    use std::collections::HashMap;
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
        // Gone since the listing: skip it.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if let Some(parent) = parent_of(&stat) {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root.as_raw()];
    while let Some(parent) = next.pop() {
        for &child in children.get(&parent).map(Vec::as_slice).unwrap_or_default() {
            found.push(Pid::from_raw(child));
            next.push(child);
        }
    }
    found
}

/// Without `/proc`, descendants are not known; the process group still is.
#[cfg(not(target_os = "linux"))]
pub(super) fn descendants(_root: Pid) -> Vec<Pid> {
    Vec::new()
}

/// The parent pid in a `/proc/PID/stat` line: `PID (COMM) STATE PPID …`, where COMM may
/// hold spaces and parentheses, so the fields are counted after its last `)`.
#[cfg(any(target_os = "linux", test))]
fn parent_of(stat: &str) -> Option<i32> {
    let (_, fields) = stat.rsplit_once(')')?;
    fields.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_after_the_command_name() {
        assert_eq!(parent_of("42 (sleep) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parent_of("42 (a) b (c) R 9 42 42 0 -1"), Some(9));
        assert_eq!(parent_of("42 (sleep"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_child_is_a_descendant() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        let me = nix::unistd::getpid();
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        assert!(descendants(me).contains(&pid));
        child.kill().expect("kill");
        child.wait().expect("wait");
    }
}
