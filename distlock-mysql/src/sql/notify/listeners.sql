-- ? key → the connection ids of the listeners waiting for its release.
SELECT listener FROM {waiters} WHERE lock_key = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
