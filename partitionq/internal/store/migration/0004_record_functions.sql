-- Version 4: dead letters and the audit trail are written only through the
-- record functions (SECURITY DEFINER, search_path pinned, recording
-- session_user, checking the engine's state; docs/security.md); slot rates;
-- when a slot last finished a batch.
--
-- Needs function/set_aside.sql
-- Needs function/record_replay.sql
-- Needs function/record_action.sql
-- Needs function/give_up.sql
-- Needs function/purge_dead_letters.sql
alter table partitionq.slot_progress add column if not exists finished_at timestamptz;
-- Handler outcomes per slot and second (unix seconds), added by every
-- progress flush and batch finish of the slot's owner: the rates Status
-- reports over the last 10 s and minute, whatever the number of workers.
-- Rows older than two minutes are deleted by the writes that add new ones,
-- so a slot has at most about 120 rows.
create table if not exists partitionq.slot_rate (
    queue   text   not null,
    grp     text   not null,
    slot    int    not null,
    sec     bigint not null,
    handled bigint not null default 0,
    failed  bigint not null default 0,
    primary key (queue, grp, slot, sec)
);

-- A schema that existed before: every role but the owner loses INSERT,
-- UPDATE, DELETE and TRUNCATE on the dead letters and the audit trail (and
-- their sequences), and gets the functions that replace them: a role that
-- could write the audit trail (an operator) set_aside, record_replay and
-- record_action; one that could write dead letters but not the audit trail
-- (a worker) give_up; one that could delete dead letters
-- purge_dead_letters. SELECT stays. (Nothing to do on a new schema.) The
-- functions are granted as they are now (give_up with the slot's epoch,
-- which version 8 added), created from their files before this runs.
do $move$
declare
    r record;
begin
    for r in
        with g as (
            select a.grantee, c.relname, a.privilege_type
              from pg_class c cross join lateral aclexplode(c.relacl) a
             where c.relnamespace = 'partitionq'::regnamespace and c.relname in ('dead_letter', 'audit') and a.grantee <> c.relowner
            union
            select a.grantee, c.relname, a.privilege_type
              from pg_class c join pg_attribute t on t.attrelid = c.oid cross join lateral aclexplode(t.attacl) a
             where c.relnamespace = 'partitionq'::regnamespace and c.relname in ('dead_letter', 'audit') and a.grantee <> c.relowner)
        select case when grantee = 0 then 'public' else quote_ident(pg_get_userbyid(grantee)) end as role,
               bool_or(relname = 'audit' and privilege_type = 'INSERT') as audits,
               bool_or(relname = 'dead_letter' and privilege_type = 'INSERT') as dead_letters,
               bool_or(relname = 'dead_letter' and privilege_type = 'DELETE') as purges,
               bool_or(privilege_type not in ('SELECT', 'REFERENCES')) as writes
          from g group by grantee
    loop
        continue when not r.writes;
        if r.audits then
            execute 'grant execute on function partitionq.set_aside(text, text, text, int, text, text, bigint[], text, text),
                     partitionq.record_replay(text, text, text, bigint[], bigint[], text, text, text),
                     partitionq.record_action(text, text, text, text, text, bigint, text, text) to ' || r.role;
        elsif r.dead_letters then
            execute 'grant execute on function partitionq.give_up(text, text, text, int, bigint, text, bigint[], int[], text[], text[]) to ' || r.role;
        end if;
        if r.purges then
            execute 'grant execute on function partitionq.purge_dead_letters(text, text, bigint[], timestamptz, text, text, text) to ' || r.role;
        end if;
        execute 'revoke insert, update, delete, truncate, trigger on partitionq.dead_letter, partitionq.audit from ' || r.role;
        execute 'revoke usage, update on sequence partitionq.dead_letter_id_seq, partitionq.audit_id_seq from ' || r.role;
    end loop;
end
$move$;
