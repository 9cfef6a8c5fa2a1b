-- The audit of every signal Lifeline sent an agent (reconnect, close_tunnel).
-- Discovery messages are not audited: they are counted. A row is committed
-- before the API answers; delivery and the agent's ack update it.
CREATE TABLE signals (
    id           INTEGER PRIMARY KEY,
    kind         TEXT    NOT NULL, -- reconnect | close_tunnel
    agent        TEXT    NOT NULL,
    proxy        TEXT    NOT NULL, -- the tunnel to leave; '' = the agent's choice
    reason       TEXT    NOT NULL,
    requested_by TEXT    NOT NULL, -- api | cli | ui | auto | periodic | graceful
    created_us   INTEGER NOT NULL,
    delivered_us INTEGER,
    acked_us     INTEGER,
    -- pending | delivered | acked | failed | undeliverable | timeout
    outcome      TEXT    NOT NULL,
    detail       TEXT    NOT NULL DEFAULT '',
    latency_us   INTEGER           -- created → acked
);
CREATE INDEX signals_agent ON signals (agent, id);
CREATE INDEX signals_created ON signals (created_us);
