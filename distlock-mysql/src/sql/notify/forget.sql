-- ? key, ? token: deletes the registrations of the fair waiter the key was just handed to
-- (it is done waiting), so that a hot key's waiters table holds only those still waiting.
DELETE FROM {waiters} WHERE lock_key = ? AND token = ?
