-- The idempotency records: a running claim (token, lease end) or a completed result
-- (response, retention end).
CREATE TABLE IF NOT EXISTS {table} (
    key text PRIMARY KEY,
    fingerprint bytea NOT NULL,
    token text,
    response bytea,
    expires_at timestamptz NOT NULL
)
