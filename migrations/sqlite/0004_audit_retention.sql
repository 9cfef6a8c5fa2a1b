-- Audit retention deletes closed episodes by their end, in small steps.
CREATE INDEX IF NOT EXISTS episodes_ended ON episodes (ended_us) WHERE ended_us IS NOT NULL;
