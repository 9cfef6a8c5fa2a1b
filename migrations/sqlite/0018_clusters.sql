-- Every resource belongs to a cluster, and so does everything that
-- happened to one: the same host name in two clusters is two agents.
--
-- The current state is keyed by the cluster first (resources, tunnels, the
-- minute's censuses); the history (events, health transitions, episodes,
-- signals, incidents) names its cluster in a column of its own. Rows
-- written before this hold '' until Lifeline first starts on the file,
-- which gives them to the cluster it is configured with (the first, if
-- several), in one transaction.
-- The same as migrations/postgres/0017_clusters.sql.
CREATE TABLE resources_by_cluster (
    kind             TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    addr             TEXT    NOT NULL,
    version          TEXT    NOT NULL,
    group_id         TEXT    NOT NULL,
    group_generation INTEGER NOT NULL,
    expires_us       INTEGER NOT NULL,
    ttl_us           INTEGER NOT NULL,
    labels           TEXT    NOT NULL, -- JSON object
    auth_server      TEXT    NOT NULL,
    cluster          TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (cluster, kind, name)
) WITHOUT ROWID;
INSERT INTO resources_by_cluster
    (kind, name, addr, version, group_id, group_generation, expires_us, ttl_us, labels, auth_server)
    SELECT kind, name, addr, version, group_id, group_generation, expires_us, ttl_us, labels, auth_server
    FROM resources;
DROP TABLE resources;
ALTER TABLE resources_by_cluster RENAME TO resources;

CREATE TABLE tunnels_by_cluster (
    name              TEXT    NOT NULL,
    agent             TEXT    NOT NULL,
    proxy             TEXT    NOT NULL,
    last_heartbeat_us INTEGER,
    expires_us        INTEGER,
    cluster           TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (cluster, name)
) WITHOUT ROWID;
INSERT INTO tunnels_by_cluster (name, agent, proxy, last_heartbeat_us, expires_us)
    SELECT name, agent, proxy, last_heartbeat_us, expires_us FROM tunnels;
DROP TABLE tunnels;
ALTER TABLE tunnels_by_cluster RENAME TO tunnels;
CREATE INDEX tunnels_agent ON tunnels (agent);

CREATE TABLE samples_by_cluster (
    at_us    BIGINT NOT NULL,
    agents   BIGINT NOT NULL,
    stranded BIGINT NOT NULL,
    degraded BIGINT NOT NULL,
    cluster  TEXT   NOT NULL DEFAULT '',
    PRIMARY KEY (cluster, at_us)
);
INSERT INTO samples_by_cluster (at_us, agents, stranded, degraded)
    SELECT at_us, agents, stranded, degraded FROM samples;
DROP TABLE samples;
ALTER TABLE samples_by_cluster RENAME TO samples;

ALTER TABLE events ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
ALTER TABLE health_transitions ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
ALTER TABLE episodes ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
ALTER TABLE signals ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
ALTER TABLE incidents ADD COLUMN cluster TEXT NOT NULL DEFAULT '';

-- Present until the rows above are given their cluster's name.
CREATE TABLE unassigned_rows (id BIGINT PRIMARY KEY CHECK (id = 1));
INSERT INTO unassigned_rows (id) VALUES (1);
