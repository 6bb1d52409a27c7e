-- ? name → how many waiting groups have a live place on it.
SELECT CAST(COUNT(*) AS SIGNED) FROM {places} WHERE name = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
