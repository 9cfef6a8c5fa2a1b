-- A sidecar streams to every replica, so an agent may have a stream on
-- several at once: one row per (agent, replica). Releasing one replica's
-- stream keeps the others', and a replica that delivers picks one holder.
-- The same as migrations/sqlite/0010_streams_per_replica.sql.
CREATE TABLE agent_streams_by_replica (
    agent        TEXT   NOT NULL,
    replica      TEXT   NOT NULL,
    since_us     BIGINT NOT NULL,
    restart_only BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (agent, replica)
);
INSERT INTO agent_streams_by_replica (agent, replica, since_us, restart_only)
    SELECT agent, replica, since_us, restart_only FROM agent_streams;
DROP TABLE agent_streams;
ALTER TABLE agent_streams_by_replica RENAME TO agent_streams;
CREATE INDEX agent_streams_replica ON agent_streams (replica);
