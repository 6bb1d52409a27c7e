-- ? key, ? token: removes the token's place (a waiter that gave up).
DELETE FROM {queue} WHERE lock_key = ? AND token = ?
