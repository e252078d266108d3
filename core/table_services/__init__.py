"""Table services, each a plan written on the timeline plus an idempotent execute: compaction, clustering,
cleaning, rollback, savepoint/restore, archival, change tracking and index builds."""
