-- CACHE 1: with a per-session cache, values handed out by different sessions would not
-- increase in the order they are drawn. Always logged, also for an UNLOGGED table, so
-- fences survive a crash that empties the table.
CREATE SEQUENCE IF NOT EXISTS {sequence} AS bigint MINVALUE 1 NO CYCLE CACHE 1
