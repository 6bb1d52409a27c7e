UPDATE {counter} SET value = value + 1 WHERE id = 1 RETURNING value
