-- The listener's sleep: ends after ? seconds, or at once (error 1317, or 1 on MySQL)
-- when a release interrupts it with KILL QUERY.
SELECT SLEEP(?)
