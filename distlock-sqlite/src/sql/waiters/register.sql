INSERT OR IGNORE INTO {waiters} (channel, socket) VALUES (?1, ?2)
