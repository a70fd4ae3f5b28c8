-- Version 17: a slot is named by its generation's number, not by its N.
-- Ownership, progress, completion and rate rows are keyed by
-- (queue, grp, generation, slot): one statement that finds a slot's row
-- decides which generation a claim, a fence or a progress write belongs
-- to, even after a resize back to an N the group had before. The slot row
-- keeps its N (the hash's modulus, and its consumer's name); progress,
-- completion and rate rows drop theirs. A group that has no generation
-- rows yet (set up before version 5 and never resized) is in its first
-- generation, number 1, which is what its next setup or resize records.
-- Rows of an N that none of their group's generations has are left over
-- from an ended generation and are deleted.
--
-- A generation made by a resize names its parent by number
-- (parent_number), as well as by N. A generation's number is never used
-- twice in a group: a resize that is aborted leaves its number on the
-- generation it came from (aborted), and the next resize numbers its
-- generation past it.
--
-- Workers built for an earlier version key these rows by N: they are
-- refused when they register or renew their lease
-- (function/refuse_old_worker.sql). is_generation and resizing, which
-- told an N's generations apart in the claim, are dropped.

alter table partitionq.generation add column parent_number int, add column aborted int;
-- Until now a resize numbered its generation one past its parent's.
update partitionq.generation set parent_number = number - 1 where parent_slots is not null;

create temporary table generation_of on commit drop as
select k.queue, k.grp, k.n,
       case when exists (select 1 from partitionq.generation g where g.queue = k.queue and g.grp = k.grp)
            then (select g.number from partitionq.generation g where g.queue = k.queue and g.grp = k.grp and g.slots = k.n)
            else 1 end as generation
  from (select queue, grp, n from partitionq.slot
        union select queue, grp, n from partitionq.slot_progress
        union select queue, grp, n from partitionq.slot_done
        union select queue, grp, n from partitionq.slot_rate) k;

-- A group without generation rows had one N (there was no resize before
-- version 5): if rows of several are there, the slot rows' N is the one.
delete from generation_of x
 where not exists (select 1 from partitionq.generation g where g.queue = x.queue and g.grp = x.grp)
   and exists (select 1 from partitionq.slot s where s.queue = x.queue and s.grp = x.grp)
   and x.n <> (select max(s.n) from partitionq.slot s where s.queue = x.queue and s.grp = x.grp);

alter table partitionq.slot add column generation int;
update partitionq.slot t set generation = x.generation from generation_of x where x.queue = t.queue and x.grp = t.grp and x.n = t.n;
delete from partitionq.slot where generation is null;
alter table partitionq.slot alter column generation set not null;
alter table partitionq.slot drop constraint slot_pkey;
alter table partitionq.slot add primary key (queue, grp, generation, slot);

alter table partitionq.slot_progress add column generation int;
update partitionq.slot_progress t set generation = x.generation from generation_of x where x.queue = t.queue and x.grp = t.grp and x.n = t.n;
delete from partitionq.slot_progress where generation is null;
alter table partitionq.slot_progress alter column generation set not null;
alter table partitionq.slot_progress drop constraint slot_progress_pkey;
alter table partitionq.slot_progress drop column n;
alter table partitionq.slot_progress add primary key (queue, grp, generation, slot);

alter table partitionq.slot_done add column generation int;
update partitionq.slot_done t set generation = x.generation from generation_of x where x.queue = t.queue and x.grp = t.grp and x.n = t.n;
delete from partitionq.slot_done where generation is null;
alter table partitionq.slot_done alter column generation set not null;
alter table partitionq.slot_done drop constraint slot_done_pkey;
alter table partitionq.slot_done drop column n;
alter table partitionq.slot_done add primary key (queue, grp, generation, slot, ev_id);

alter table partitionq.slot_rate add column generation int;
update partitionq.slot_rate t set generation = x.generation from generation_of x where x.queue = t.queue and x.grp = t.grp and x.n = t.n;
delete from partitionq.slot_rate where generation is null;
alter table partitionq.slot_rate alter column generation set not null;
alter table partitionq.slot_rate drop constraint slot_rate_pkey;
alter table partitionq.slot_rate drop column n;
alter table partitionq.slot_rate add primary key (queue, grp, generation, slot, sec);

drop function if exists partitionq.is_generation(text, text, int, int);
drop function if exists partitionq.resizing(text, text, int, int);
