-- The highest incident id ever written, which pruning (retention) never
-- rewinds: a new incident's id is above every id a postmortem's link may
-- still name. Kept by a trigger, so every path that writes incidents
-- keeps it. The same as migrations/sqlite/0009_incident_ids.sql.
CREATE TABLE id_high_water (
    name  TEXT   PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO id_high_water (name, value)
    SELECT 'incidents', coalesce(max(id), 0) FROM incidents;
CREATE FUNCTION incidents_high_water() RETURNS trigger AS $$
BEGIN
    UPDATE id_high_water SET value = greatest(value, NEW.id) WHERE name = 'incidents';
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER incidents_high_water AFTER INSERT ON incidents
    FOR EACH ROW EXECUTE FUNCTION incidents_high_water();
