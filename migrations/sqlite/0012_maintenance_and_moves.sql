-- Maintenance windows (`maintenance`): what an operator said is planned.
-- A stranding a window explains is planned: shown, not acted on, not
-- notified. The same as migrations/postgres/0011_maintenance_and_moves.sql.
CREATE TABLE maintenance_windows (
    id          INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused
    targets     TEXT   NOT NULL, -- JSON array of "kind/glob"
    from_us     BIGINT NOT NULL,
    until_us    BIGINT NOT NULL,
    reason      TEXT   NOT NULL,
    created_by  TEXT   NOT NULL,
    created_us  BIGINT NOT NULL,
    ended_by    TEXT,
    ended_us    BIGINT,
    -- Whether its start and end were told (`maintenance.started`/`ended`).
    told_start  BIGINT NOT NULL DEFAULT 0, -- 1 once told
    told_end    BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX maintenance_windows_until ON maintenance_windows (until_us);

-- Who created, ended or deleted each window, and when: kept for
-- `storage.audit_retention`, after the window itself is deleted.
CREATE TABLE maintenance_audit (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    window_id BIGINT NOT NULL,
    action    TEXT   NOT NULL, -- created, ended, deleted
    actor     TEXT   NOT NULL,
    at_us     BIGINT NOT NULL,
    detail    TEXT   NOT NULL  -- the window as it was, JSON
);
CREATE INDEX maintenance_audit_window ON maintenance_audit (window_id, id);
CREATE INDEX maintenance_audit_at ON maintenance_audit (at_us);

-- An incident's plan: 'maintenance' (with its window) or 'rollout'.
ALTER TABLE incidents ADD COLUMN planned TEXT;
ALTER TABLE incidents ADD COLUMN window_id BIGINT;

-- Agents whose open episode moved from one incident to another (their
-- cause changed while their state did not, or a window began or ended):
-- an incident's figures count them until they left, and its page says
-- where they went. Kept like incidents.
CREATE TABLE incident_moves (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    episode_id    BIGINT NOT NULL,
    agent         TEXT   NOT NULL,
    from_incident BIGINT NOT NULL,
    to_incident   BIGINT NOT NULL,
    at_us         BIGINT NOT NULL
);
CREATE INDEX incident_moves_from ON incident_moves (from_incident, id);
CREATE INDEX incident_moves_to ON incident_moves (to_incident, id);
CREATE INDEX incident_moves_at ON incident_moves (at_us);
