-- Version 14: identical workers share a group's slots (docs/architecture.md,
-- "Sharing the slots"). A worker's lease row says which group and
-- generation it runs and, by its member token (one per worker process,
-- whatever the number of generations it runs), which process it is, whether
-- it shares the slots with the other workers (balance) or runs only the
-- slots it lists (pins). A slot's row may name the member it is handed to
-- (handoff_to): its owner drains it and releases it, and only that member
-- may take it while that member lives. Rows written by an older worker have
-- no member: such a worker takes slots as before, and the others leave its
-- slots alone.
alter table partitionq.worker
    add column if not exists queue      text,
    add column if not exists grp        text,
    add column if not exists n          int,
    add column if not exists generation int,
    add column if not exists member     text,
    add column if not exists balance    boolean not null default false,
    add column if not exists pins       int[];
create index if not exists worker_group on partitionq.worker (queue, grp) where member is not null;
alter table partitionq.slot
    add column if not exists handoff_to text,
    add column if not exists handoff_at timestamptz;
