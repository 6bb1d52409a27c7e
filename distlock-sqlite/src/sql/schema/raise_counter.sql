UPDATE {counter} SET value = max(value, ?1) WHERE id = 1
