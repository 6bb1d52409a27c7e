-- The sockets waiting on any of the channels in ?1 (a JSON array).
SELECT DISTINCT channel, socket FROM {waiters} WHERE channel IN (SELECT value FROM json_each(?1))
