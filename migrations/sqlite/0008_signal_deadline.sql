-- Each signal's own deadline for its ack: a restart waits for its agent to
-- turn ready (`signals.restart_ack_timeout`), much longer than an ordinary
-- ack (`signals.ack_timeout`). The leader's sweep of unanswered signals
-- reads it, so a slow but healthy restart is never swept as a timeout.
-- NULL on rows written before: created_us + ack_timeout stands in. The
-- same as migrations/postgres/0007_signal_deadline.sql.
ALTER TABLE signals ADD COLUMN deadline_us INTEGER;
