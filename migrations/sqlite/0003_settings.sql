-- Dynamic settings (RFD 0016): one row per setting with its origin
-- (defaults | config-file | dynamic), reconciled with the config file at
-- every start. Values are JSON.
CREATE TABLE settings (
    name       TEXT PRIMARY KEY,
    value      TEXT    NOT NULL,
    origin     TEXT    NOT NULL,
    updated_us INTEGER NOT NULL,
    updated_by TEXT    NOT NULL
) WITHOUT ROWID;

-- Every change of a setting, at start or through the API; never pruned.
CREATE TABLE settings_audit (
    id         INTEGER PRIMARY KEY,
    at_us      INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    -- start | create | force | confirm | rm
    action     TEXT    NOT NULL,
    old_value  TEXT,
    old_origin TEXT,
    new_value  TEXT    NOT NULL,
    new_origin TEXT    NOT NULL,
    actor      TEXT    NOT NULL
);
CREATE INDEX settings_audit_name ON settings_audit (name, id);

