-- The highest incident id ever written, which pruning (retention) never
-- rewinds: a new incident's id is above every id a postmortem's link may
-- still name. Kept by a trigger, so every path that writes incidents
-- keeps it. The same as migrations/postgres/0008_incident_ids.sql.
CREATE TABLE id_high_water (
    name  TEXT   PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO id_high_water (name, value)
    SELECT 'incidents', coalesce(max(id), 0) FROM incidents;
CREATE TRIGGER incidents_high_water AFTER INSERT ON incidents
BEGIN
    UPDATE id_high_water SET value = max(value, NEW.id) WHERE name = 'incidents';
END;
