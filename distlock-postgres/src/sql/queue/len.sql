-- $1 key → how many live places its queue has.
SELECT count(*) FROM {queue} WHERE key = $1 AND expires_at > clock_timestamp()
