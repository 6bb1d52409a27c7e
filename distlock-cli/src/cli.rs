//! The command line, as `clap` parses it.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgGroup, ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use distlock::{KeyPattern, LockKey, LockMode, OwnerId, Token};

use crate::exit::EXIT_STATUS_HELP;

/// Parses the process's command line.
pub(crate) fn parse() -> Result<Cli, clap::Error> {
    parse_from(std::env::args_os())
}

/// Parses `args` (the first is the program's name), keeping the order in which `run`'s
/// `--read` and `--write` names were given.
pub(crate) fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let help = |arg: clap::Arg| {
        let own = arg.get_long_help().or(arg.get_help()).map(ToString::to_string).unwrap_or_default();
        arg.long_help(format!("{own}\n\n{}", crate::store::default_help()))
    };
    let matches = Cli::command().mut_arg("store", help).try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(|error| error.format(&mut Cli::command()))?;
    if let (Command::Run(run), Some(("run", run_matches))) = (&mut cli.command, matches.subcommand()) {
        run.order_members(run_matches);
        run.key_from_command()?;
    }
    Ok(cli)
}

/// A usage error that fits one line: two flags that cannot go together, named.
/// `None` for the others, which clap prints with the usage.
pub(crate) fn one_line(error: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::ArgumentConflict {
        return None;
    }
    let flag = |value: Option<&ContextValue>| match value? {
        ContextValue::String(text) => Some(text.split_whitespace().next()?.to_owned()),
        ContextValue::Strings(texts) => Some(texts.first()?.split_whitespace().next()?.to_owned()),
        _ => None,
    };
    let given = flag(error.get(ContextKind::InvalidArg))?;
    let other = flag(error.get(ContextKind::PriorArg))?;
    Some(format!("{given} cannot be used with {other} (see --help)"))
}

/// Distributed locks from the shell: run a command under a lock, a read/write lock, a
/// semaphore slot or a group of names; inspect, list and release locks; set permits;
/// benchmark a store. One tool for every store: sqlite:// (the default), redis://, postgres://,
/// mysql://, etcd://, memory://.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, after_help = EXIT_STATUS_HELP)]
pub(crate) struct Cli {
    /// The lock store: `sqlite:///PATH` (the processes of one host, no server; the
    /// default), `redis://[:PASSWORD@]HOST[:PORT][/DB]`,
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, `mysql://USER@HOST/DB` or `memory://`
    /// (also `redis+cluster://H1,H2,…`, `redis+sentinel://S1,S2,…/MASTER`,
    /// `redlock://H1,H2,H3`, and `etcd://H1:P1,H2:P2,…` in a build with the `etcd`
    /// feature).
    #[arg(long, global = true, env = "DISTLOCK_STORE", value_name = "URL", hide_env_values = true)]
    pub(crate) store: Option<String>,

    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding a lock (renewed automatically), then release it.
    ///
    /// The lock is a plain lock (--key) or a lock group: --read and --write names, each
    /// repeatable, taken all together or not at all — a read lock (--read), a write lock
    /// (--write), several names at once, or a semaphore slot (--read NAME --permits N).
    /// Group names live apart from the keys of plain locks.
    ///
    /// Waits for the lock as long as it takes unless --wait or --no-wait say otherwise
    /// (as flock, `etcdctl lock` and `consul lock` do: a job scheduled on several machines
    /// runs once each time, one after the other, rather than failing where it lost the
    /// race); a waiting --write holds back new readers of its names. The command runs in
    /// its own process group, below a small keeper process; its exit status becomes
    /// distlock's. Its environment gets:
    ///
    ///   DISTLOCK_KEY    the key (--key), or the first name of the group
    ///   DISTLOCK_NAMES  the key, or the group's names in command-line order, one a line
    ///   DISTLOCK_TOKEN  the token of this acquisition (of the whole group)
    ///   DISTLOCK_FENCE  the fencing number (a group's stamp); empty when the store does
    ///                   not fence
    ///   DISTLOCK_OWNER  the group's owner (APP@INSTANCE); empty for --key
    ///
    /// Nothing the command starts runs on without the lock:
    ///
    ///   SIGINT, SIGTERM, SIGHUP, SIGQUIT to distlock: passed on to the command's process
    ///     group; the lock is held (and renewed) until it exits, then released.
    ///   Lease lost (renewals failing, or the key deleted or taken): the command and
    ///     everything it started get SIGTERM, then SIGKILL after --kill-grace, before
    ///     another owner can take the lock; status 76.
    ///   The command exits but left processes running: they get SIGTERM, then SIGKILL
    ///     after --kill-grace, before the lock is released.
    ///   SIGKILL of distlock (`kill -9`, the OOM killer): the keeper sees distlock's end
    ///     of their socket close and SIGKILLs the command and every process it started,
    ///     double-forked or setsid ones included (Linux: the keeper is a child
    ///     subreaper), at once — long before the lease, no longer renewed, expires.
    ///     `etcdctl lock` and `consul lock` leave the command running in this case.
    ///   SIGSTOP of distlock (or distlock hung): renewals stop; the keeper SIGKILLs the
    ///     command tree when distlock would have after a loss (the loss margin before the
    ///     lease expires, plus --kill-grace), without SIGTERM first. distlock, once
    ///     continued, exits with 76.
    ///   SIGKILL of the keeper itself (it blocks the signals above): the command gets
    ///     SIGKILL (Linux parent-death signal) and distlock kills its process group;
    ///     processes that left the group are not reached. Status 70.
    ///
    /// On Unix systems other than Linux, the keeper kills the command's process group
    /// only: processes that left it (setsid, a new group) are not found.
    #[command(after_help = EXIT_STATUS_HELP, verbatim_doc_comment)]
    Run(RunArgs),
    /// Run a command while this process leads an election, then resign.
    ///
    /// Campaigns in election NAME with --value (this instance's identity or address) and
    /// waits in line until it leads (unless --wait or --no-wait say otherwise); the
    /// command then runs while the lead lasts, under the same supervision as `run`:
    /// stopped (SIGTERM, then SIGKILL after --kill-grace) before another candidate can
    /// lead if the lead is lost, its whole process tree killed if distlock is killed.
    /// When the command exits, or distlock gets SIGTERM/SIGINT (passed on to the
    /// command), the lead is resigned and the next candidate leads at once. The lead is
    /// the lock `election:NAME`; its term is that lock's fencing number, so the store
    /// must fence (Redis: `fencing=true`). Its environment gets:
    ///
    ///   DISTLOCK_ELECTION  the election's name
    ///   DISTLOCK_TERM      this leader's term (strictly greater than every earlier one)
    ///   DISTLOCK_VALUE     the value it campaigned with
    ///   DISTLOCK_FENCE     the term again, as `run` names it
    ///   DISTLOCK_KEY, DISTLOCK_TOKEN  the lock's key and token
    #[command(after_help = EXIT_STATUS_HELP, verbatim_doc_comment)]
    Elect(ElectArgs),
    /// Show the leader of an election: term, value and time left, or "no leader";
    /// --watch prints each change (a new leader, a new value, nobody) as it happens.
    Leader(LeaderArgs),
    /// Run a command at each firing of a cron schedule on at most one of the machines
    /// that run the same schedule on the same store.
    ///
    /// Each firing's lock is `job:NAME:<unix seconds of the firing>`, taken without
    /// waiting: the process that gets it runs the command, the others skip the firing.
    /// The lock lasts --at-most and is kept at least --at-least after the command
    /// started, so a machine whose clock is a little behind finds the firing taken. A
    /// firing this process reaches more than --late-start after its instant (it was
    /// paused or overloaded) is not run; if no process ran it, it is reported as missed
    /// (once across the machines). At start, firings that every process missed while
    /// all were down are reported too. No firing runs twice while the machines' clocks
    /// differ by less than --at-least minus --late-start.
    ///
    /// The command runs as under `run`: in its own process group below a keeper, so that
    /// nothing it started outlives distlock (also after `kill -9`); still running when
    /// the firing's lock stops being safe (a fifth of --at-most, or --kill-grace, before
    /// it ends) it gets SIGTERM, and SIGKILL after --kill-grace. Runs until interrupted;
    /// running commands get the signal too, and are waited for. Its environment gets
    /// DISTLOCK_JOB (the name), DISTLOCK_FIRING (the firing's Unix seconds) and
    /// DISTLOCK_FENCE.
    #[command(verbatim_doc_comment)]
    Schedule(ScheduleArgs),
    /// Show every holder of a name: the plain lock's holder and every group holder (shared
    /// or exclusive), with owner, time left and fence — or "free"; and the places of the
    /// acquisitions waiting for it, with how long each has waited.
    ///
    /// OWNER is a fingerprint of the holder's token, as in `distlock list`; APP@INSTANCE
    /// is a group holder's owner id (what `release --owner` takes); --show-tokens adds the
    /// tokens themselves. WAITED is a place's age by the store's clock, since its waiter
    /// first took it; PLACE LEFT is when it runs out unless the waiter refreshes it.
    Inspect(InspectArgs),
    /// Release as an administrator: a plain lock, only if it is still held by the given
    /// token (KEY --token T), or every group hold of an owner (--owner APP@INSTANCE).
    #[command(after_help = EXIT_STATUS_HELP)]
    Release(ReleaseArgs),
    /// Show or record the permits of a name: how many group holders of each mode it
    /// admits at once, for every client's next grant.
    ///
    /// Without a setter, shows both modes. A mode with no recorded permits admits what
    /// each client assumes: exclusive 1 and shared unlimited (the first `run --permits N`
    /// records N). Holders beyond a lowered count keep their holds; new grants wait until
    /// the count drops.
    Permits(PermitsArgs),
    /// List the held locks of a store — single locks and group holds — sorted by key: key,
    /// mode, owner, time left, fence, kind, owner id; then the waiting places on them,
    /// oldest first, with how long each has waited.
    ///
    /// Pages through the store (Redis SCAN, PostgreSQL index ranges), so it does not
    /// block a store holding many locks. OWNER is a fingerprint of the holder's token
    /// (the first 8 hex digits of its SHA-256): equal for equal tokens, but the token
    /// cannot be recovered from it; --show-tokens prints the tokens themselves. KIND is
    /// `lock` or `group` (run --read/--write/--permits); APP@INSTANCE a group holder's
    /// owner id. WAITED is a place's age by the store's clock (on etcd, which keeps
    /// none: from the waiter's clock when it took the place to this one's now).
    List(ListArgs),
    /// A live view of a store's held locks in the terminal, as htop shows processes.
    ///
    /// Columns: KEY, MODE, HOLDER (the token's fingerprint, as in `distlock list`; +N
    /// more holders of a shared lock), TIME LEFT, FENCE, WAITERS (acquisitions queued for
    /// the key and waiting groups, with how long the oldest has waited)
    /// and HAND-OFFS (new holders in the last minute). The header gives the store, the
    /// keys in the table, what the last refresh read, the hand-offs per second over the
    /// last 10 intervals and the hottest keys.
    ///
    /// Each refresh reads ONE page of the listing (--page keys examined: one Redis SCAN
    /// and the read-only list script on what it found, or one PostgreSQL index range),
    /// going on from where the last one stopped and starting again at the end, plus the
    /// waiters of at most 8 of the rows on screen, in turn (one read of the queue's places
    /// and one of the waiting groups' places each). A store with 1,000,000 held keys costs one bounded
    /// read per interval; its table fills in as the pages come round.
    ///
    /// The table shows each key as last seen, its time left counted down since. A key
    /// leaves it when a whole pass of the listing went by without it, or when its time
    /// left, so counted, runs out; at most 100,000 keys are remembered. A key seen with
    /// other holders (tokens or fences) than at its last sighting counts one hand-off; a
    /// key that changes hands several times between two sightings counts once.
    ///
    /// Keys: q, Esc or Ctrl-C quit; Up/Down, PgUp/PgDn, Home/End scroll; s cycles the
    /// order (time left, hottest, key). Needs a terminal: with stdout not one it exits
    /// with a usage error (64); `distlock list` prints to pipes. Group holds are not
    /// listed: `distlock list` and `distlock inspect` show them.
    Top(TopArgs),
    /// Measure a store: uncontended cycle, N workers on distinct keys, N workers on one
    /// hot key (hand-off latency). The store defaults to memory://, so this works on a
    /// machine without servers.
    Bench(BenchArgs),
}

/// `distlock run`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("names").multiple(true).args(["read", "write"])))]
#[command(override_usage = "distlock run [OPTIONS] KEY -- CMD...\n       \
    distlock run [OPTIONS] (--key KEY | --read NAME... | --write NAME...) [--] CMD...")]
pub(crate) struct RunArgs {
    /// The plain lock's key, e.g. `backup:db1` (1–512 bytes, no control characters).
    /// Without --key, --read and --write, `distlock run KEY -- CMD…` names it too.
    #[arg(long, short, value_parser = parse_key, conflicts_with = "names")]
    pub(crate) key: Option<LockKey>,

    /// Hold NAME in shared mode (a read lock; a semaphore slot with --permits); repeat
    /// for more names. With --write, one group: every name or none.
    #[arg(long, value_parser = parse_key, value_name = "NAME")]
    pub(crate) read: Vec<LockKey>,

    /// Hold NAME in exclusive mode (a write lock); repeat for more names. While it
    /// waits, new readers of NAME wait behind it.
    #[arg(long, value_parser = parse_key, value_name = "NAME")]
    pub(crate) write: Vec<LockKey>,

    /// The --read names are a semaphore of N slots: at most N shared holders at once. The
    /// first run records N with each name (as `distlock permits NAME --shared N` does, and
    /// shows); a run whose N differs from the recorded size is refused (status 64).
    /// Without --permits, the recorded size applies (default: unlimited readers).
    #[arg(
        long,
        value_name = "N",
        requires = "read",
        conflicts_with = "key",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub(crate) permits: Option<u32>,

    /// The owner recorded with the group's holds, `APP@INSTANCE`, so that an
    /// administrator can free them with `distlock release --owner`. Default:
    /// `distlock@HOST:PID:RANDOM`, unique to this run.
    #[arg(long, value_name = "APP@INSTANCE", value_parser = parse_owner, requires = "names", conflicts_with = "key")]
    pub(crate) owner: Option<OwnerId>,

    /// The group's names and modes in command-line order (from --read and --write).
    #[arg(skip)]
    pub(crate) members: Vec<(LockMode, LockKey)>,

    /// The lease; renewed every max(1 s, min(10 s, TTL / 3)) while the command runs, so a
    /// crashed distlock frees the lock at most one TTL later.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) ttl: Duration,

    /// Wait at most this long for a held lock, then give up with status 75
    /// (--conflict-exit-code). Default: wait as long as it takes; 0s makes one attempt.
    #[arg(long, short = 'w', value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) wait: Option<Duration>,

    /// Make one attempt: if the lock is held, give up at once with status 75
    /// (--conflict-exit-code). The same as --wait 0s.
    #[arg(long, short = 'n', conflicts_with = "wait")]
    pub(crate) no_wait: bool,

    /// The longest pause between two attempts while waiting.
    #[arg(long, default_value = "50ms", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) retry: Duration,

    /// Renew the lease at this interval instead of every max(1 s, min(10 s, TTL / 3))
    /// (must be at least 10 ms and shorter than the TTL minus the larger of --kill-grace
    /// and a fifth of the TTL).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) renew_every: Option<Duration>,

    /// After a lost lease, how long the command has between SIGTERM and SIGKILL. The loss
    /// is signalled at least this long (and at least a fifth of the TTL) before another
    /// owner could take the lock, so SIGKILL lands before that; it must be shorter than
    /// the TTL.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) kill_grace: Duration,

    /// Exit with this status (1–255) instead of 75 when the lock is held by another owner
    /// (as `flock -E`), so that it cannot be mistaken for a status of the command.
    #[arg(long, short = 'E', value_name = "STATUS", value_parser = clap::value_parser!(u8).range(1..=255))]
    pub(crate) conflict_exit_code: Option<u8>,

    /// Exit with this status (1–255) instead of 76 when the lease was lost.
    #[arg(long, value_name = "STATUS", value_parser = clap::value_parser!(u8).range(1..=255))]
    pub(crate) lost_exit_code: Option<u8>,

    /// Exit with this status (1–255) instead of 69, 70, 126 or 127 when distlock could not
    /// do its part: the store failed before the command ran, the command could not be
    /// started or was not found, or an internal error. stderr says which.
    #[arg(long, value_name = "STATUS", value_parser = clap::value_parser!(u8).range(1..=255))]
    pub(crate) error_exit_code: Option<u8>,

    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,

    /// `distlock elect`: the election's name and this candidate's value.
    #[arg(skip)]
    pub(crate) lead: Option<(String, String)>,
}

/// `distlock elect`.
#[derive(Debug, Args)]
#[command(override_usage = "distlock elect [OPTIONS] NAME --value VALUE -- CMD...")]
pub(crate) struct ElectArgs {
    /// The election's name (its lock is `election:NAME`).
    pub(crate) name: String,

    /// This candidate's value, e.g. its host and port, shown by `distlock leader` (at most
    /// 1024 bytes). Default: HOST:PID.
    #[arg(long)]
    pub(crate) value: Option<String>,

    /// The leader's lease: a crashed leader is replaced at most this long after its last
    /// renewal.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) ttl: Duration,

    /// Wait at most this long to lead, then give up with status 75 (--conflict-exit-code).
    /// Default: wait as long as it takes.
    #[arg(long, short = 'w', value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) wait: Option<Duration>,

    /// Lead now or give up at once with status 75.
    #[arg(long, short = 'n', conflicts_with = "wait")]
    pub(crate) no_wait: bool,

    /// After a lost lead, how long the command has between SIGTERM and SIGKILL (shorter
    /// than the TTL).
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) kill_grace: Duration,

    /// Exit with this status instead of 75 when another candidate still led at the end
    /// of --wait.
    #[arg(long, short = 'E', value_name = "STATUS", value_parser = clap::value_parser!(u8).range(1..=255))]
    pub(crate) conflict_exit_code: Option<u8>,

    /// Exit with this status instead of 76 when the lead was lost.
    #[arg(long, value_name = "STATUS", value_parser = clap::value_parser!(u8).range(1..=255))]
    pub(crate) lost_exit_code: Option<u8>,

    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

impl ElectArgs {
    /// The same supervision as `run`, on the election's lock.
    pub(crate) fn into_run(self) -> Result<RunArgs, clap::Error> {
        let key = parse_key(&format!("election:{}", self.name))
            .map_err(|error| clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("NAME: {error}\n")))?;
        let value = self.value.unwrap_or_else(default_value);
        Ok(RunArgs {
            key: Some(key),
            read: Vec::new(),
            write: Vec::new(),
            permits: None,
            owner: None,
            members: Vec::new(),
            ttl: self.ttl,
            wait: self.wait,
            no_wait: self.no_wait,
            retry: Duration::from_millis(50),
            renew_every: None,
            kill_grace: self.kill_grace,
            conflict_exit_code: self.conflict_exit_code,
            lost_exit_code: self.lost_exit_code,
            error_exit_code: None,
            command: self.command,
            lead: Some((self.name, value)),
        })
    }
}

/// `HOST:PID`, a candidate's value when none is given.
fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// `distlock leader`.
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// The election's name.
    pub(crate) name: String,

    /// Keep watching and print every change until interrupted.
    #[arg(long)]
    pub(crate) watch: bool,

    /// `table` for people; `json`: one JSON object per line.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
}

/// `distlock schedule`.
#[derive(Debug, Args)]
#[command(override_usage = "distlock schedule [OPTIONS] NAME --cron SCHEDULE -- CMD...")]
pub(crate) struct ScheduleArgs {
    /// The job's name.
    pub(crate) name: String,

    /// The cron schedule, in UTC: five fields (minute hour day month weekday), or six with
    /// seconds first, or an alias such as @hourly.
    #[arg(long, value_name = "SCHEDULE")]
    pub(crate) cron: String,

    /// The longest a firing's lock is held (the lease it is taken with).
    #[arg(long, default_value = "10m", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) at_most: Duration,

    /// The shortest a firing's lock is held after its command started.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) at_least: Duration,

    /// How late after its instant this process may still start a firing.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) late_start: Duration,

    /// How long a command still running when its firing's lock stops being safe has
    /// between SIGTERM and SIGKILL; shorter than --at-most.
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) kill_grace: Duration,

    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// `distlock inspect`.
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The name: a plain lock's key and a group name at once.
    #[arg(value_parser = parse_key)]
    pub(crate) key: LockKey,

    /// `table` for people; `json`: one JSON object, on one line.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,

    /// The same as --format json.
    #[arg(long, conflicts_with = "format")]
    pub(crate) json: bool,

    /// Also print each holder's whole token (as `distlock release --token` needs it).
    #[arg(long, alias = "show-token")]
    pub(crate) show_tokens: bool,
}

impl InspectArgs {
    /// The format asked for, --json included.
    pub(crate) fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            self.format
        }
    }
}

/// `distlock release`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("what").required(true).args(["key", "owner"])))]
pub(crate) struct ReleaseArgs {
    /// The plain lock's key (with --token).
    #[arg(value_parser = parse_key, requires = "token")]
    pub(crate) key: Option<LockKey>,

    /// The holder's token (36-character UUID), e.g. from `inspect --show-tokens` or the
    /// command's DISTLOCK_TOKEN. The lock is released only if this token still holds it.
    #[arg(long, value_parser = parse_token, requires = "key", conflicts_with = "owner")]
    pub(crate) token: Option<Token>,

    /// Free every group hold recorded for this owner (any name, any mode), e.g. what a
    /// crashed instance left; prints how many. `distlock inspect` shows the owners.
    #[arg(long, value_name = "APP@INSTANCE", value_parser = parse_owner)]
    pub(crate) owner: Option<OwnerId>,
}

/// `distlock permits`.
#[derive(Debug, Args)]
pub(crate) struct PermitsArgs {
    /// The group name.
    #[arg(value_parser = parse_key)]
    pub(crate) key: LockKey,

    /// Record N shared permits: at most N shared holders (readers, semaphore slots) at
    /// once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) shared: Option<u32>,

    /// Record N exclusive permits: at most N exclusive holders at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) exclusive: Option<u32>,

    /// Remove the recorded shared permits (each client's default applies again).
    #[arg(long, conflicts_with = "shared")]
    pub(crate) clear_shared: bool,

    /// Remove the recorded exclusive permits (each client's default applies again).
    #[arg(long, conflicts_with = "exclusive")]
    pub(crate) clear_exclusive: bool,

    /// `table` for people; `json`: one JSON object, on one line.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
}

impl PermitsArgs {
    /// The changes asked for: (mode, permits), `None` to clear.
    pub(crate) fn changes(&self) -> Vec<(LockMode, Option<u32>)> {
        let mut changes = Vec::new();
        if self.shared.is_some() || self.clear_shared {
            changes.push((LockMode::Shared, self.shared));
        }
        if self.exclusive.is_some() || self.clear_exclusive {
            changes.push((LockMode::Exclusive, self.exclusive));
        }
        changes
    }
}

impl RunArgs {
    /// `distlock run KEY -- CMD…`: without --key, --read or --write, the word before `--`
    /// is the plain lock's key.
    fn key_from_command(&mut self) -> Result<(), clap::Error> {
        use clap::error::ErrorKind;
        if self.key.is_some() || !self.members.is_empty() {
            return Ok(());
        }
        let error = |kind: ErrorKind, message: String| {
            let mut command = Cli::command();
            let run = command.find_subcommand_mut("run").map(std::mem::take).unwrap_or_default();
            clap::Error::raw(kind, message).format(&mut run.bin_name("distlock run"))
        };
        if self.command.len() < 3 || self.command[1] != "--" {
            return Err(error(
                ErrorKind::MissingRequiredArgument,
                "no lock given: `distlock run KEY -- CMD…`, or --key KEY, --read NAME or --write NAME before the command"
                    .to_owned(),
            ));
        }
        let text = self.command[0].to_string_lossy();
        let key = parse_key(&text)
            .map_err(|why| error(ErrorKind::ValueValidation, format!("invalid value '{text}' for 'KEY': {why}")))?;
        self.key = Some(key);
        self.command.drain(..2);
        Ok(())
    }

    /// Fills [`members`](Self::members) from --read and --write, in the order they were
    /// given on the command line.
    fn order_members(&mut self, matches: &ArgMatches) {
        let indices = |id: &str| -> Vec<usize> { matches.indices_of(id).map(Iterator::collect).unwrap_or_default() };
        let mut members: Vec<(usize, LockMode, LockKey)> = Vec::new();
        for (mode, keys, indices) in [
            (LockMode::Shared, std::mem::take(&mut self.read), indices("read")),
            (LockMode::Exclusive, std::mem::take(&mut self.write), indices("write")),
        ] {
            members.extend(
                keys.into_iter().enumerate().map(|(n, key)| (indices.get(n).copied().unwrap_or(usize::MAX), mode, key)),
            );
        }
        members.sort_by_key(|(index, _, _)| *index);
        self.members = members.into_iter().map(|(_, mode, key)| (mode, key)).collect();
    }
}

/// `distlock list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only keys matching this glob: `*` any characters, `?` one character, `\` makes
    /// the next character literal (`\*`); everything else matches itself.
    #[arg(long = "match", short = 'm', default_value = "*", value_parser = parse_pattern, value_name = "PATTERN")]
    pub(crate) pattern: KeyPattern,

    /// `table` for people; `json`: one JSON object per listing, on one line.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,

    /// Also print each holder's whole token (as `distlock release --token` needs it).
    #[arg(long)]
    pub(crate) show_tokens: bool,

    /// List again every INTERVAL (default 2s) until Ctrl-C: the screen is redrawn on a
    /// terminal; otherwise each listing follows the last (tables after a time-stamped
    /// separator line).
    #[arg(
        long,
        value_name = "INTERVAL",
        num_args = 0..=1,
        default_missing_value = "2s",
        value_parser = parse_duration
    )]
    pub(crate) watch: Option<Duration>,

    /// Print at most N locks (the first N in key order); the total is still counted.
    #[arg(long, value_name = "N")]
    pub(crate) limit: Option<usize>,

    /// How many keys the store examines per request (one SCAN / one index range).
    #[arg(
        long,
        default_value_t = 1_000,
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..=10_000)
    )]
    pub(crate) page_size: u16,
}

/// `distlock top`.
#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// Only keys matching this glob (as `distlock list --match`).
    #[arg(long = "match", short = 'm', default_value = "*", value_parser = parse_pattern, value_name = "PATTERN")]
    pub(crate) pattern: KeyPattern,

    /// How often a page is read and the screen redrawn.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "INTERVAL")]
    pub(crate) interval: Duration,

    /// How many keys the store examines per refresh (one SCAN / one index range).
    #[arg(
        long,
        default_value_t = 1_000,
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..=10_000)
    )]
    pub(crate) page: u16,
}

/// How `distlock list`, `inspect` and `permits` print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns under a header.
    Table,
    /// One JSON object (per listing: JSON Lines with `list --watch`).
    Json,
}

/// `distlock bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// How long each scenario runs (per implementation).
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) duration: Duration,

    /// Workers in the distinct-keys and hot-key scenarios.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) workers: u16,

    /// The lease of each acquisition.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) ttl: Duration,

    /// The retry interval of waiting workers (hot key). The library also wakes on a
    /// release when the store signals one (memory); the raw baseline only polls.
    #[arg(long, default_value = "50ms", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) retry: Duration,

    /// The scenarios to run (all by default).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "SCENARIO")]
    pub(crate) scenarios: Vec<Scenario>,

    /// Also run the store's raw commands (no distlock) in the same run and print the
    /// ratio: memory — a HashMap behind a tokio mutex; Redis — SET NX PX + EVALSHA release;
    /// PostgreSQL — the store's INSERT … ON CONFLICT and UPDATE statements through sqlx.
    #[arg(long)]
    pub(crate) baseline: bool,

    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    pub(crate) json: bool,

    /// Also draw SVG plots into DIR: the hand-off latency distribution (with the hot-key
    /// scenario), cycle time vs concurrent tasks and vs keys held by a lock group, and
    /// each task's wait with fair and with barging waiting. Those measurements run after
    /// the scenarios, each point for --duration.
    #[arg(long, value_name = "DIR")]
    pub(crate) plot: Option<std::path::PathBuf>,
}

/// A `bench` scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Scenario {
    /// One worker: acquire + release of one free key, in a loop.
    Uncontended,
    /// N workers, each cycling its own key.
    Distinct,
    /// N workers on one key; each waits for it, and measures release → next holder.
    HotKey,
}

impl Scenario {
    /// Every scenario, in the order they run.
    pub(crate) const ALL: [Self; 3] = [Self::Uncontended, Self::Distinct, Self::HotKey];

    /// The scenario's name in tables and JSON.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Uncontended => "uncontended",
            Self::Distinct => "distinct",
            Self::HotKey => "hot-key",
        }
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|error| format!("{error}; write a duration such as 30s, 250ms or 1m30s"))
}

fn parse_key(text: &str) -> Result<LockKey, String> {
    LockKey::new(text).map_err(|error| error.to_string())
}

fn parse_pattern(text: &str) -> Result<KeyPattern, String> {
    KeyPattern::new(text).map_err(|error| error.to_string())
}

fn parse_token(text: &str) -> Result<Token, String> {
    Token::parse(text).map_err(|error| error.to_string())
}

fn parse_owner(text: &str) -> Result<OwnerId, String> {
    OwnerId::parse(text).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_command_after_the_flags() {
        let cli = parse_from(["distlock", "run", "--key", "k", "--ttl", "2s", "--", "ls", "-l"]).unwrap();
        let Command::Run(run) = cli.command else { panic!("not run") };
        assert_eq!(run.ttl, Duration::from_secs(2));
        assert_eq!(run.command, ["ls", "-l"]);
    }

    #[test]
    fn list_takes_a_pattern_and_an_optional_watch_interval() {
        let cli = parse_from(["distlock", "list"]).unwrap();
        let Command::List(list) = cli.command else { panic!("not list") };
        assert!(list.pattern.is_all() && list.watch.is_none() && list.format == Format::Table);
        let cli = parse_from(["distlock", "list", "--match", "order:*", "--watch", "--format", "json"]).unwrap();
        let Command::List(list) = cli.command else { panic!("not list") };
        assert_eq!((list.pattern.as_str(), list.watch), ("order:*", Some(Duration::from_secs(2))));
        let cli = parse_from(["distlock", "list", "--watch", "250ms"]).unwrap();
        let Command::List(list) = cli.command else { panic!("not list") };
        assert_eq!(list.watch, Some(Duration::from_millis(250)));
        for bad in [&["distlock", "list", "--match", "a\\"][..], &["distlock", "list", "--page-size", "0"]] {
            assert!(parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn top_takes_a_pattern_an_interval_and_a_page() {
        let cli = parse_from(["distlock", "top"]).unwrap();
        let Command::Top(top) = cli.command else { panic!("not top") };
        assert_eq!((top.pattern.as_str(), top.interval, top.page), ("*", Duration::from_secs(1), 1_000));
        let cli = parse_from(["distlock", "top", "-m", "order:*", "--interval", "200ms", "--page", "50"]).unwrap();
        let Command::Top(top) = cli.command else { panic!("not top") };
        assert_eq!((top.pattern.as_str(), top.interval, top.page), ("order:*", Duration::from_millis(200), 50));
        for bad in [&["distlock", "top", "--page", "0"][..], &["distlock", "top", "--interval", "soon"]] {
            assert!(parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn run_keeps_the_order_of_read_and_write_names() {
        let args = ["distlock", "run", "--write", "b", "--read", "a", "--write", "c", "--permits", "2", "--", "true"];
        let cli = parse_from(args).unwrap();
        let Command::Run(run) = cli.command else { panic!("not run") };
        let members: Vec<(LockMode, &str)> = run.members.iter().map(|(mode, key)| (*mode, key.as_str())).collect();
        assert_eq!(members, [(LockMode::Exclusive, "b"), (LockMode::Shared, "a"), (LockMode::Exclusive, "c")]);
        assert_eq!((run.key, run.permits), (None, Some(2)));
    }

    #[test]
    fn run_takes_a_key_or_group_names_never_both() {
        for args in [
            &["distlock", "run", "--key", "k", "--read", "a", "--", "true"][..],
            &["distlock", "run", "--key", "k", "--write", "a", "--", "true"],
            &["distlock", "run", "--", "true"],
            &["distlock", "run", "--write", "a", "--permits", "2", "--", "true"],
            &["distlock", "run", "--read", "a", "--permits", "0", "--", "true"],
            &["distlock", "run", "--key", "k", "--owner", "app@one", "--", "true"],
            &["distlock", "run", "--read", "a", "--owner", "app", "--", "true"],
            &["distlock", "release", "k"],
            &["distlock", "release", "--owner", "app@one", "--token", "4f1c0a4e-8d5b-4d61-9a8e-0c2b7f3e9a10"],
            &["distlock", "release", "k", "--owner", "app@one"],
            &["distlock", "permits", "p", "--shared", "0"],
            &["distlock", "permits", "p", "--exclusive", "2", "--clear-exclusive"],
        ] {
            let err = parse_from(args).unwrap_err();
            assert!(err.use_stderr(), "{args:?}");
        }
        let cli = parse_from(["distlock", "permits", "p", "--shared", "3", "--clear-exclusive"]).unwrap();
        let Command::Permits(permits) = cli.command else { panic!("not permits") };
        assert_eq!(permits.changes(), [(LockMode::Shared, Some(3)), (LockMode::Exclusive, None)]);
    }

    #[test]
    fn bad_durations_keys_and_tokens_are_rejected() {
        for args in [
            &["distlock", "run", "--key", "k", "--ttl", "soon", "--", "true"][..],
            &["distlock", "run", "--key", "", "--", "true"],
            &["distlock", "release", "k", "--token", "abc"],
        ] {
            let err = parse_from(args).unwrap_err();
            assert!(err.use_stderr(), "{args:?}");
        }
    }
}
