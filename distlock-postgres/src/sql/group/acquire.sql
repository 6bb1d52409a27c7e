-- One attempt: $1 names text[], $2 modes text[] ('R' shared, 'W' exclusive), $3 default
-- permits int4[] (NULL: unlimited), $4 token uuid, $5 owner text, $6 TTL ms, $7 intent
-- TTL ms or NULL, $8 ticket or NULL, $9 whether the call is run again after a lost
-- connection, $10 whether a blocked attempt leaves places for every member, not only
-- exclusive ones → one row, the fence when granted, else the ticket (acquire_group.sql).
SELECT granted_fence, blocked_ticket FROM {acquire_group}($1, $2, $3, $4::uuid, $5, $6, $7, $8, $9, $10)
