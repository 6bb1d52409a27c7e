INSERT INTO {permits} (key, mode, permits) VALUES (?1, ?2, ?3)
ON CONFLICT (key, mode) DO UPDATE SET permits = excluded.permits
