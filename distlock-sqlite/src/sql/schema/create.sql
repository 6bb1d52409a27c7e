-- Every table the store uses, created when missing. Instants are milliseconds of the
-- host's CLOCK_BOOTTIME with the boot id they belong to (`placed_ms`: when a waiter's
-- place was first taken); (pid, pid_start, pid_ns) name
-- the process that wrote a row.
CREATE TABLE IF NOT EXISTS {leases} (
    key        TEXT    NOT NULL PRIMARY KEY,
    token      TEXT    NOT NULL,
    fence      INTEGER NOT NULL,
    boot       TEXT    NOT NULL,
    expires_ms INTEGER NOT NULL,
    pid        INTEGER NOT NULL,
    pid_start  INTEGER NOT NULL,
    pid_ns     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {counter} (
    id    INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
);
INSERT OR IGNORE INTO {counter} (id, value) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS {queue} (
    key        TEXT    NOT NULL,
    token      TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    boot       TEXT    NOT NULL,
    placed_ms  INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    pid        INTEGER NOT NULL,
    pid_start  INTEGER NOT NULL,
    pid_ns     INTEGER NOT NULL,
    PRIMARY KEY (key, token)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {queue_order} ON {queue} (key, seq);
CREATE TABLE IF NOT EXISTS {holders} (
    key        TEXT    NOT NULL,
    token      TEXT    NOT NULL,
    mode       TEXT    NOT NULL CHECK (mode IN ('shared', 'exclusive')),
    owner      TEXT    NOT NULL,
    fence      INTEGER NOT NULL,
    boot       TEXT    NOT NULL,
    expires_ms INTEGER NOT NULL,
    pid        INTEGER NOT NULL,
    pid_start  INTEGER NOT NULL,
    pid_ns     INTEGER NOT NULL,
    PRIMARY KEY (key, token)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {holders_owner} ON {holders} (owner);
CREATE TABLE IF NOT EXISTS {intents} (
    key        TEXT    NOT NULL,
    token      TEXT    NOT NULL,
    mode       TEXT    NOT NULL CHECK (mode IN ('shared', 'exclusive')),
    ticket     INTEGER NOT NULL,
    boot       TEXT    NOT NULL,
    placed_ms  INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    pid        INTEGER NOT NULL,
    pid_start  INTEGER NOT NULL,
    pid_ns     INTEGER NOT NULL,
    PRIMARY KEY (key, token)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {permits} (
    key     TEXT    NOT NULL,
    mode    TEXT    NOT NULL CHECK (mode IN ('shared', 'exclusive')),
    permits INTEGER NOT NULL,
    PRIMARY KEY (key, mode)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {waiters} (
    channel TEXT NOT NULL,
    socket  TEXT NOT NULL,
    PRIMARY KEY (channel, socket)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {waiters_socket} ON {waiters} (socket);
CREATE TABLE IF NOT EXISTS {values} (
    key   TEXT    NOT NULL PRIMARY KEY,
    token TEXT    NOT NULL,
    fence INTEGER NOT NULL,
    value TEXT    NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {boots} (
    id    INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    boot  TEXT    NOT NULL,
    epoch INTEGER NOT NULL
);
