-- Restarts asked of sidecars, counted across replicas: the cap on
-- restarts in flight (`signals.max_restarts_in_flight`) and the pause after
-- failed restarts hold for the whole fleet, whichever replica holds the
-- sidecar's stream. The same as migrations/postgres/0003_restarts.sql.

-- 1: the signal asks the agent's sidecar to restart the agent.
ALTER TABLE signals ADD COLUMN restart INTEGER NOT NULL DEFAULT 0;
CREATE INDEX signals_restarts ON signals (id) WHERE restart = 1;

-- 1: the stream is a restart-only peer's (a sidecar's).
ALTER TABLE agent_streams ADD COLUMN restart_only INTEGER NOT NULL DEFAULT 0;
