-- ?1 key → the record, live or not.
SELECT fingerprint, token, boot, lease_ms, response, retain_until_ms FROM {records} WHERE key = ?1
