-- The group's names ({list}) → (fence, clock µs) per name, every name's row locked until
-- the transaction ends, in key order.
SELECT fence, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) FROM {names} WHERE name IN ({list}) ORDER BY name FOR UPDATE
