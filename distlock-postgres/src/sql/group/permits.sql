-- $1 name, $2 mode → the recorded permits, or no row.
SELECT permits FROM {permits} WHERE name = $1 AND mode = $2::"char"
