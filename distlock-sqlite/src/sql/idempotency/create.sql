-- The idempotency records, created when missing: a running claim (token, and its lease's
-- end as milliseconds of the host's CLOCK_BOOTTIME with the boot id it belongs to) or a
-- completed result (response, and the end of its retention as milliseconds since the
-- Unix epoch, so that results outlive a reboot).
CREATE TABLE IF NOT EXISTS {records} (
    key             TEXT    NOT NULL PRIMARY KEY,
    fingerprint     BLOB    NOT NULL,
    token           TEXT,
    boot            TEXT,
    lease_ms        INTEGER,
    response        BLOB,
    retain_until_ms INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {records_retained} ON {records} (retain_until_ms);
