-- ?1 key, ?2 fingerprint, ?3 token, ?4 boot, ?5 lease end: the key is claimed for the
-- token (run in the transaction that found no live record of another claim).
INSERT INTO {records} (key, fingerprint, token, boot, lease_ms, response, retain_until_ms)
VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL)
ON CONFLICT (key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    token = excluded.token,
    boot = excluded.boot,
    lease_ms = excluded.lease_ms,
    response = NULL,
    retain_until_ms = NULL
