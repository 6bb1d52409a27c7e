-- The names ({list}), ? token, the names ({list}), ? token, ? ticket → µs until the
-- earliest end of what may block the token's group: the live holds of other tokens, and
-- the live places of other tokens with an older ticket. NULL when nothing does.
SELECT GREATEST(MIN(expires_at) - CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), 1) FROM (
    SELECT expires_at FROM {holders}
    WHERE name IN ({list}) AND token <> ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
    UNION ALL
    SELECT expires_at FROM {places}
    WHERE name IN ({list}) AND token <> ? AND ticket < ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
) AS blocking
