-- $1 name → how many live places (intents of waiting groups) it has.
SELECT count(*) FROM {holders}
WHERE name = $1 AND token IS NOT NULL AND mode IN ('I', 'J') AND expires_at > clock_timestamp()
