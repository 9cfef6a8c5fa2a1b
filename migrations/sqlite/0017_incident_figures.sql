-- An incident's figures each have one owner, written with the incident:
--
-- * Each signal names the incident it counts toward (its agent was in
--   that incident when it was sent), so an incident's `signals` is the
--   number of its signal rows.
-- * Its agent time degraded, and a planned incident's planned time, are
--   summed like its stranded time, not recomputed by each reader.
--
-- Rows written before this are matched from the episodes: a signal to
-- the incident of its agent's episode open when it was sent, each
-- incident's signals recounted from them, and its degraded (or planned)
-- time summed from its episodes.
-- The same as migrations/postgres/0016_incident_figures.sql.
ALTER TABLE signals ADD COLUMN incident_id BIGINT;
UPDATE signals SET incident_id = (
    SELECT e.incident_id FROM episodes e
    WHERE e.agent = signals.agent AND e.incident_id IS NOT NULL
      AND e.started_us <= signals.created_us
      AND (e.ended_us IS NULL OR e.ended_us >= signals.created_us)
    ORDER BY e.id DESC LIMIT 1);
CREATE INDEX signals_incident ON signals (incident_id, id);
UPDATE incidents SET signals = (
    SELECT count(*) FROM signals s WHERE s.incident_id = incidents.id);

ALTER TABLE incidents ADD COLUMN degraded_us BIGINT NOT NULL DEFAULT 0;
ALTER TABLE incidents ADD COLUMN planned_us BIGINT NOT NULL DEFAULT 0;
UPDATE incidents SET degraded_us = COALESCE((
    SELECT SUM(COALESCE(e.ended_us, incidents.ended_us, e.started_us) - e.started_us)
    FROM episodes e WHERE e.incident_id = incidents.id AND e.state = 'degraded'), 0)
    WHERE planned IS NULL;
UPDATE incidents SET planned_us = COALESCE((
    SELECT SUM(COALESCE(e.ended_us, incidents.ended_us, e.started_us) - e.started_us)
    FROM episodes e WHERE e.incident_id = incidents.id), 0)
    WHERE planned IS NOT NULL;
