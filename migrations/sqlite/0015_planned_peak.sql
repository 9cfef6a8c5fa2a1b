-- A planned incident's agents are planned, in no stranded or degraded
-- figure and in no agent-minutes stranded: it has a peak of its own.
-- Rows written before this kept planned agents in the stranded and
-- degraded peaks and minutes; the larger peak becomes the planned one.
-- The same as migrations/postgres/0014_planned_peak.sql.
ALTER TABLE incidents ADD COLUMN peak_planned BIGINT NOT NULL DEFAULT 0;
UPDATE incidents SET peak_planned = MAX(peak_stranded, peak_degraded),
    peak_stranded = 0, peak_degraded = 0, stranded_us = 0
    WHERE planned IS NOT NULL;
