DELETE FROM {waiters} WHERE channel = ?1 AND socket = ?2
