DELETE FROM {intents} WHERE token = ?2 AND key IN (SELECT value FROM json_each(?1))
