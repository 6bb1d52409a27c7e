-- ? name, ? mode, ? permits: records the permits of (name, mode).
INSERT INTO {permits} (name, mode, permits) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE permits = VALUES(permits)
