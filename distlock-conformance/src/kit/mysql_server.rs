//! Private MariaDB (or MySQL) servers on free ports, for fault tests that stop, restart
//! and kill the server, and `KILL` for the connections of one pool.
//!
//! Fault tests must never disturb the shared server behind `DISTLOCK_MYSQL_URL`, so they
//! start their own: `mariadb-install-db` makes a data directory (in `/dev/shm` when there
//! is one, so a write's `fsync` costs nothing), and `mariadbd` (or `mysqld`) runs on it
//! bound to `127.0.0.1`, as the current user (`--user=root` when that is root), with
//! root allowed in without a password. The server is killed and its directory removed on
//! drop.
//!
//! ```no_run
//! use distlock_conformance::kit::mysql_server::MysqlServer;
//!
//! let Some(mut server) = MysqlServer::start_or_skip("my fault test") else { return };
//! let url = server.url(); // mysql://root@127.0.0.1:<port>/distlock
//! server.stop(); // a clean shutdown: connections drop, committed data stays
//! server.restart(); // same port and data
//! # let _ = url;
//! ```

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::{Connection, MySqlConnection};

/// How long a started server gets to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How many free ports `start` tries before giving up.
const PORT_ATTEMPTS: usize = 4;
/// The database the private server's URL names (created at start).
pub const DATABASE: &str = "distlock";

/// A private MariaDB server on loopback. Dropping it kills the server and removes its
/// data directory.
#[derive(Debug)]
pub struct MysqlServer {
    dir: PathBuf,
    server: PathBuf,
    port: u16,
    child: Option<Child>,
}

/// The server binary: `mariadbd`, else `mysqld` (on PATH or in `/usr/sbin`).
fn server_binary() -> Option<PathBuf> {
    ["mariadbd", "mysqld"].iter().find_map(|name| which(name))
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join(name))
        .find(|file| file.is_file())
}

fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

impl MysqlServer {
    /// Whether a server binary, `mariadb-install-db` and the `mariadb` client can be found.
    pub fn binary_available() -> bool {
        server_binary().is_some() && which("mariadb-install-db").is_some() && which("mariadb").is_some()
    }

    /// Starts a private server, or returns `None` after printing that `test` skipped
    /// (no binary).
    ///
    /// # Panics
    ///
    /// When the binary is missing and [`services_required`](super::services_required),
    /// or when the server does not start.
    pub fn start_or_skip(test: &str) -> Option<Self> {
        if !Self::binary_available() {
            assert!(!super::services_required(), "{test}: mariadbd is not installed and DISTLOCK_REQUIRE_SERVICES=1");
            eprintln!("SKIPPED {test}: install mariadb-server to run it");
            return None;
        }
        Some(Self::start())
    }

    /// Starts a private server on a free port and waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// When no binary is installed or the server does not start.
    pub fn start() -> Self {
        let server = server_binary().expect("mariadbd or mysqld");
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir = base.join(format!("distlock-mysql-{}", uuid::Uuid::new_v4().simple()));
        // A temporary directory of its own: the shared /tmp is cleaned by others.
        std::fs::create_dir_all(dir.join("tmp")).expect("data directory");
        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if running_as_root() {
            install.arg("--user=root");
        }
        let out = install.output().expect("run mariadb-install-db");
        assert!(out.status.success(), "mariadb-install-db failed: {}", String::from_utf8_lossy(&out.stderr));
        let mut this = Self { dir, server, port: 0, child: None };
        for attempt in 1..=PORT_ATTEMPTS {
            this.port = free_port();
            match this.launch() {
                Ok(()) => {
                    this.create_database();
                    return this;
                }
                Err(log) if attempt < PORT_ATTEMPTS && log.contains("already in use") => {}
                Err(log) => panic!("the private mariadbd did not start:\n{log}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// `mysql://root@127.0.0.1:<port>/distlock`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Shuts the server down (`SIGTERM`, waited for): every connection drops, committed
    /// data stays.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let terminated = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            if !terminated.is_ok_and(|status| status.success()) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    /// Kills the server (`SIGKILL`): every connection drops at once; changes not yet
    /// flushed may be lost (the server runs with `innodb_flush_log_at_trx_commit=0`).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data (after [`stop`](Self::stop)).
    ///
    /// # Panics
    ///
    /// When it does not come back.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(log) = self.launch() {
            panic!("the private mariadbd did not restart:\n{log}");
        }
    }

    /// Creates the user `name` (no password) with every privilege on the database
    /// [`DATABASE`] and returns its URL: a pool of that user can be cut off by
    /// [`kill_connections`] while an admin connection as `root` stays.
    ///
    /// # Panics
    ///
    /// When the server refuses.
    pub async fn create_user(&self, name: &str) -> String {
        let mut conn = MySqlConnection::connect(&self.url()).await.expect("admin connection");
        for statement in
            [format!("CREATE USER IF NOT EXISTS '{name}'@'%'"), format!("GRANT ALL ON {DATABASE}.* TO '{name}'@'%'")]
        {
            sqlx::raw_sql(&statement).execute(&mut conn).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        let _ = conn.close().await;
        format!("mysql://{name}@127.0.0.1:{}/{DATABASE}", self.port)
    }

    fn launch(&mut self) -> Result<(), String> {
        let log = self.dir.join("error.log");
        let _ = std::fs::remove_file(&log);
        let mut command = Command::new(&self.server);
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.dir.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", self.dir.join("mysqld.pid").display()))
            .arg(format!("--log-error={}", log.display()))
            .arg("--skip-log-bin")
            .arg("--skip-name-resolve")
            .arg("--innodb-flush-log-at-trx-commit=0")
            .arg("--innodb-buffer-pool-size=64M")
            .arg("--max-connections=500")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if running_as_root() {
            command.arg("--user=root");
        }
        let mut child = command.spawn().map_err(|error| format!("spawn {}: {error}", self.server.display()))?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("exited with {status}:\n{}", std::fs::read_to_string(&log).unwrap_or_default()));
            }
            if TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok()
                && std::fs::read_to_string(&log).is_ok_and(|text| text.contains("ready for connections"))
            {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {STARTUP_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Creates [`DATABASE`] with the `mariadb` client (the fixture is synchronous, and
    /// may be started inside a runtime).
    fn create_database(&self) {
        let out = Command::new("mariadb")
            .args(["--protocol=tcp", "-h", "127.0.0.1", "-P", &self.port.to_string(), "-u", "root"])
            .args(["-e", &format!("CREATE DATABASE IF NOT EXISTS {DATABASE}")])
            .stdin(Stdio::null())
            .output()
            .expect("run the mariadb client");
        assert!(out.status.success(), "create the database: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for MysqlServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// Kills (`KILL <id>`), as an operator would, every connection of `user` to the server
/// at `admin_url` other than the admin connection itself, and returns how many.
///
/// # Panics
///
/// When the server cannot be reached or refuses.
pub async fn kill_connections(admin_url: &str, user: &str) -> u64 {
    let mut conn = MySqlConnection::connect(admin_url).await.expect("admin connection");
    let ids: Vec<i64> =
        sqlx::query_scalar("SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND USER = ?")
            .bind(user)
            .fetch_all(&mut conn)
            .await
            .expect("list connections");
    for id in &ids {
        // A connection that ended meanwhile is not an error here.
        let _ = sqlx::raw_sql(&format!("KILL {id}")).execute(&mut conn).await;
    }
    let _ = conn.close().await;
    u64::try_from(ids.len()).expect("fits")
}
