-- Lifeline's history and last known state. Times are microseconds since the
-- Unix epoch (UTC). Never edit a landed migration: add a new one.

-- Current resources (last known; loaded as stale at start).
CREATE TABLE resources (
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
    PRIMARY KEY (kind, name)
) WITHOUT ROWID;

-- Current tunnels.
CREATE TABLE tunnels (
    name              TEXT PRIMARY KEY,
    agent             TEXT    NOT NULL,
    proxy             TEXT    NOT NULL,
    last_heartbeat_us INTEGER,
    expires_us        INTEGER
) WITHOUT ROWID;
CREATE INDEX tunnels_agent ON tunnels (agent);

-- History of every accepted change: heartbeats, updates, deletes, expiries,
-- health transitions, watcher state, rejected inputs. Pruned by retention.
CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    at_us      INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    event      TEXT    NOT NULL,
    expires_us INTEGER,
    ttl_us     INTEGER,
    detail     TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX events_at ON events (at_us);
CREATE INDEX events_name ON events (name, id);

-- Every auth health transition.
CREATE TABLE health_transitions (
    id          INTEGER PRIMARY KEY,
    auth_server TEXT    NOT NULL,
    addr        TEXT    NOT NULL,
    at_us       INTEGER NOT NULL,
    from_status TEXT    NOT NULL,
    to_status   TEXT    NOT NULL,
    mode        TEXT    NOT NULL,
    detail      TEXT    NOT NULL
);
CREATE INDEX health_transitions_server ON health_transitions (auth_server, id);

-- One row per period an agent spent degraded or stranded.
CREATE TABLE episodes (
    id              INTEGER PRIMARY KEY,
    agent           TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    reasons         TEXT    NOT NULL, -- comma-separated
    cause           TEXT    NOT NULL,
    cause_resource  TEXT    NOT NULL,
    started_us      INTEGER NOT NULL,
    ended_us        INTEGER,
    ended_by_signal INTEGER,
    end_reason      TEXT
);
CREATE INDEX episodes_agent ON episodes (agent, id);
CREATE INDEX episodes_open ON episodes (id) WHERE ended_us IS NULL;
