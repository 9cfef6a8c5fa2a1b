-- Keys every replica signs with (`store::keys`): the dashboard's session
-- cookies and CSRF tokens, so that a sign-in on one replica holds on any
-- other, and across restarts. Made once, by the first replica to start.
-- The same as migrations/sqlite/0013_shared_keys.sql.
CREATE TABLE shared_keys (
    name       TEXT   PRIMARY KEY,
    value      TEXT   NOT NULL, -- 64 hex digits
    created_us BIGINT NOT NULL
);
