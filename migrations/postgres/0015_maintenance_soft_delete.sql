-- Deleting a maintenance window keeps its row (and so its audit and its
-- history): it is ended now, by whoever deleted it, and marked deleted.
-- The same as migrations/sqlite/0016_maintenance_soft_delete.sql.
ALTER TABLE maintenance_windows ADD COLUMN deleted_us BIGINT;
