-- What a sidecar said its restart may take before the ack
-- (`Capabilities.restart_wait_seconds`), so a replica that records a
-- restart for an agent another holds gives it the same deadline.
-- The same as migrations/sqlite/0014_restart_wait.sql.
ALTER TABLE agent_streams ADD COLUMN restart_wait_ms BIGINT NOT NULL DEFAULT 0;
