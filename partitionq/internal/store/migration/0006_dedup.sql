-- Version 6: send once. Dedup records (partitionq.dedup), one per (queue,
-- dedup id) sent within its window, claimed and recorded only through
-- dedup_claim and dedup_record (SECURITY DEFINER, search_path pinned;
-- docs/security.md); each queue's dedup window (partitionq.queue_config);
-- expired records removed in bounded work by expire_dedup (the ticker's
-- maintenance, or a call of its own under pgqd; docs/operations.md).

-- Settings of a queue that partitionq keeps (the engine's are the engine's):
-- its dedup window. No row: the default (an hour). Written by setup (the owner).
create table if not exists partitionq.queue_config (
    queue        text     primary key,
    dedup_window interval not null
);

-- One row per (queue, dedup id) sent within its window. ev_id is the event
-- first sent with it; it is null only inside the sending transaction,
-- between the claim and the record (a row committed without one, which only
-- a hand-made call can leave, is claimed again by the next send). hits
-- counts the duplicates refused (in committed sends), last_hit_at the last.
-- A row past expires_at is removed by expire_dedup (or claimed again).
-- Half of each page is left free, so that the record of a claim (ev_id set,
-- no indexed column changed) is a heap-only update on the claim's page.
create table if not exists partitionq.dedup (
    queue       text        not null,
    dedup_id    text        not null,
    key         text        not null,
    ev_id       bigint,
    sent_at     timestamptz not null,
    expires_at  timestamptz not null,
    hits        bigint      not null default 0,
    last_hit_at timestamptz,
    primary key (queue, dedup_id)
) with (fillfactor = 50);
-- expire_dedup's walk, oldest first.
create index if not exists dedup_expires_at on partitionq.dedup (expires_at);
-- A key's records that refused duplicates (Client.Key): rows enter it on
-- their first hit, so the sends themselves do not write it.
create index if not exists dedup_hits on partitionq.dedup (queue, key, last_hit_at) where hits > 0;
