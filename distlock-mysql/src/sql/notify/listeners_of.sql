-- The names ({list}) → the connection ids of the listeners waiting for a change of any.
SELECT DISTINCT listener FROM {waiters}
WHERE lock_key IN ({list}) AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
