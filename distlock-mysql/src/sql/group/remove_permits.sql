-- ? name, ? mode: removes the recorded permits of (name, mode).
DELETE FROM {permits} WHERE name = ? AND mode = ?
