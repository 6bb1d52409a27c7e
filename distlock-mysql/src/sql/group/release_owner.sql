-- ? owner → every hold of the owner removed (the owner index).
DELETE FROM {holders} WHERE owner = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
