CREATE INDEX IF NOT EXISTS {holders_owner} ON {holders} (owner)
