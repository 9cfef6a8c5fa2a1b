-- Several replicas on one database: the leader lease, each replica's
-- heartbeat, and which replica holds each agent's signal stream. The same
-- tables as migrations/sqlite/0005_replicas.sql (where one process is
-- always the only replica and they stay empty).

-- The leader lease: one row. Its holder writes history and sends the
-- automatic signals until `deadline_us` (the database's clock); `term`
-- grows with every new tenure and fences the writer's transactions.
CREATE TABLE leader_lease (
    id          BIGINT PRIMARY KEY CHECK (id = 1),
    holder      TEXT   NOT NULL,
    term        BIGINT NOT NULL,
    deadline_us BIGINT NOT NULL,
    since_us    BIGINT NOT NULL
);

-- Every replica that has run, with its heartbeat (the database's clock).
CREATE TABLE replicas (
    id           TEXT   PRIMARY KEY,
    http_addr    TEXT   NOT NULL,
    grpc_addr    TEXT   NOT NULL,
    started_us   BIGINT NOT NULL,
    heartbeat_us BIGINT NOT NULL
);

-- Which replica holds each agent's signal stream; trusted only while that
-- replica's heartbeat is fresh.
CREATE TABLE agent_streams (
    agent    TEXT   PRIMARY KEY,
    replica  TEXT   NOT NULL,
    since_us BIGINT NOT NULL
);
CREATE INDEX agent_streams_replica ON agent_streams (replica);

-- Signals not yet answered, for the leader's sweep of those nobody will.
CREATE INDEX signals_open ON signals (created_us) WHERE outcome IN ('pending', 'delivered');

-- Signal ids now come from the table's own sequence (several replicas
-- insert signals); rows written before carried their own ids.
SELECT setval(pg_get_serial_sequence('signals', 'id'),
              COALESCE((SELECT max(id) FROM signals), 0) + 1, false);
