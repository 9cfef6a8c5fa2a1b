-- Every resource belongs to a cluster, and so does everything that
-- happened to one: the same host name in two clusters is two agents.
--
-- The current state is keyed by the cluster first (resources, tunnels, the
-- minute's censuses); the history (events, health transitions, episodes,
-- signals, incidents) names its cluster in a column of its own. Rows
-- written before this hold '' until Lifeline first starts on the
-- database, which gives them to the cluster it is configured with (the
-- first, if several), in one transaction.
--
-- A replica of an earlier release cannot write these tables (its upserts
-- name the old keys): Lifeline does not apply this while one is live, and
-- an earlier release refuses a database that holds it.
-- The same as migrations/sqlite/0018_clusters.sql.
ALTER TABLE resources ADD COLUMN cluster TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE resources DROP CONSTRAINT resources_pkey, ADD PRIMARY KEY (cluster, kind, name);
ALTER TABLE tunnels ADD COLUMN cluster TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE tunnels DROP CONSTRAINT tunnels_pkey, ADD PRIMARY KEY (cluster, name);
ALTER TABLE samples ADD COLUMN cluster TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE samples DROP CONSTRAINT samples_pkey, ADD PRIMARY KEY (cluster, at_us);

ALTER TABLE events ADD COLUMN cluster TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE health_transitions ADD COLUMN cluster TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE episodes ADD COLUMN cluster TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE signals ADD COLUMN cluster TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE incidents ADD COLUMN cluster TEXT COLLATE "C" NOT NULL DEFAULT '';

-- Present until the rows above are given their cluster's name.
CREATE TABLE unassigned_rows (id BIGINT PRIMARY KEY CHECK (id = 1));
INSERT INTO unassigned_rows (id) VALUES (1);
