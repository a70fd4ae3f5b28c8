-- Version 2: a key blocked longer than a worker's MaxBlocked is flagged.
alter table partitionq.failure add column if not exists flagged_at timestamptz;
