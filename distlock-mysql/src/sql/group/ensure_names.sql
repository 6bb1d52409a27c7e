-- The group's names ({rows}: one "(?, 0)" per name): makes sure each has a row to lock.
-- Its own autocommit statement, before the grant's transaction.
INSERT IGNORE INTO {names} (name, fence) VALUES {rows}
