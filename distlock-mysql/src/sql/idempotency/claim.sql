-- ? key, ? fingerprint, ? token, ? lease ms, then ? token, ? fingerprint, ? token, ? token,
-- ? token, ? token, ? lease ms. Started exactly when the statement's insert id
-- (LAST_INSERT_ID(expr), reported in the OK packet) is 1: the key had no record, or its
-- lease or retention ended, or it is a running claim of the same token (a claim retried
-- after a lost answer). Otherwise the insert id is 0 and nothing changes; `read.sql`
-- then tells what holds the key. MySQL assigns left to right, each assignment seeing the
-- ones before: the condition stays true once `token` is the caller's, and
-- `expires_at`, which it reads, is assigned last.
INSERT INTO {table} (idem_key, fingerprint, token, response, expires_at)
VALUES (?, ?, ?, NULL, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000 + LAST_INSERT_ID(1) - 1)
ON DUPLICATE KEY UPDATE
    fingerprint = IF(expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) OR token = ?, ?, fingerprint),
    response = IF(expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) OR token = ?, NULL, response),
    token = IF(expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) OR token = ?, ?, token),
    expires_at = IF(expires_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) OR token = ?,
                    CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + ? * 1000 + LAST_INSERT_ID(1) - 1,
                    expires_at + LAST_INSERT_ID(0))
