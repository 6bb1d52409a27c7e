-- ? name, ? mode → the recorded permits, or no row.
SELECT permits FROM {permits} WHERE name = ? AND mode = ?
