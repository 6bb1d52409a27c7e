-- ?3 is the key's channel: the sockets waiting on it (names without spaces) come back
-- with the deleted row, so that the release wakes them without another query.
DELETE FROM {leases} WHERE key = ?1 AND token = ?2
RETURNING boot, expires_ms, (SELECT group_concat(socket, ' ') FROM {waiters} WHERE channel = ?3) AS sockets
