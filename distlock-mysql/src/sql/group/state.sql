-- The group's names ({list}, three times) → what the grant rule reads: kind 0 a live
-- holder (name, token, mode), 1 a live place (name, token, mode, ticket), 2 a recorded
-- permit (name, mode, permits).
SELECT 0, name, token, mode, 0 FROM {holders} WHERE name IN ({list}) AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
UNION ALL
SELECT 1, name, token, mode, ticket FROM {places} WHERE name IN ({list}) AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
UNION ALL
SELECT 2, name, NULL, mode, permits FROM {permits} WHERE name IN ({list})
