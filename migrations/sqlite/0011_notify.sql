-- What Lifeline tells people (`notify`). Each event is written in the same
-- transaction as the change that caused it (an incident opened, updated or
-- resolved), so none is lost across a restart or a change of leader. Kept
-- for `storage.audit_retention`. The same as migrations/postgres/0010_notify.sql.
CREATE TABLE notify_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused, even once pruned
    at_us       BIGINT NOT NULL,
    kind        TEXT   NOT NULL, -- incident.opened, incident.updated, ...
    incident_id BIGINT,
    body        TEXT   NOT NULL  -- the webhook body, JSON
);
CREATE INDEX notify_events_at ON notify_events (at_us);

-- Each webhook's place in the events: the last one it was given (delivered
-- or dropped). A webhook seen for the first time starts at the newest.
CREATE TABLE webhook_cursors (
    webhook    TEXT   PRIMARY KEY,
    last_event BIGINT NOT NULL
);

-- The delivery log: one row per webhook and event, updated at each attempt.
CREATE TABLE webhook_deliveries (
    webhook    TEXT   NOT NULL,
    event_id   BIGINT NOT NULL,
    kind       TEXT   NOT NULL,
    at_us      BIGINT NOT NULL, -- the last attempt
    outcome    TEXT   NOT NULL, -- delivered, retrying, dropped
    status     BIGINT,          -- the receiver's HTTP status, if it answered
    latency_us BIGINT,
    attempts   BIGINT NOT NULL,
    error      TEXT,
    PRIMARY KEY (webhook, event_id)
);
CREATE INDEX webhook_deliveries_at ON webhook_deliveries (at_us);
