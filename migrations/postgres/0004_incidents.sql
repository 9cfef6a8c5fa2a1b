-- Incidents: one root cause's occurrence, from the first agent it strands
-- or degrades to the last one's recovery (see `fleet::model::incidents`).
-- Kept for `storage.audit_retention` after they end. The same as
-- migrations/sqlite/0007_incidents.sql.
CREATE TABLE incidents (
    id             BIGINT PRIMARY KEY,
    cause          TEXT   NOT NULL, -- a CauseKind name
    resource       TEXT   NOT NULL, -- the proxy or auth server ('' for none)
    started_us     BIGINT NOT NULL,
    ended_us       BIGINT,
    peak_stranded  BIGINT NOT NULL,
    peak_degraded  BIGINT NOT NULL,
    agents         BIGINT NOT NULL, -- agents it held, each once
    signals        BIGINT NOT NULL, -- signals sent to them while in it
    stranded_us    BIGINT NOT NULL, -- agent time stranded in it, summed
    recover_p50_us BIGINT,
    recover_max_us BIGINT
);
CREATE INDEX incidents_open ON incidents (id) WHERE ended_us IS NULL;
CREATE INDEX incidents_started ON incidents (started_us);
CREATE INDEX incidents_ended ON incidents (ended_us);
CREATE INDEX incidents_cause ON incidents (cause, resource, id);
CREATE INDEX incidents_resource ON incidents (resource, started_us);

-- The incident an episode belongs to (that of its latest cause).
ALTER TABLE episodes ADD COLUMN incident_id BIGINT;
CREATE INDEX episodes_incident ON episodes (incident_id, id);

-- The agents by state at the start of each minute, written by the leader
-- (`/api/v1/history`); kept like incidents.
CREATE TABLE samples (
    at_us    BIGINT PRIMARY KEY,
    agents   BIGINT NOT NULL,
    stranded BIGINT NOT NULL,
    degraded BIGINT NOT NULL
);
