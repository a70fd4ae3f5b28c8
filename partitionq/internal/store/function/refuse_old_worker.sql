-- Workers say which schema version they were built for
-- (worker.schema_version). A worker built for a version before 17 keys
-- slots by their N, not by their generation (a worker of partitionq before
-- v0.3 says nothing at all): the trigger worker_version on
-- partitionq.worker refuses it with this function when it registers or
-- renews its lease, with an error naming the fix.
create or replace function partitionq.refuse_old_worker() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $f$
begin
    if new.schema_version is null or new.schema_version < 17 then
        raise exception 'partitionq''s schema in this database is version 17 or newer, which names slots by their generation; this worker (%, on %) was built for %: stop it and run a partitionq that knows schema version 17 or later (docs/operations.md, "Upgrading partitionq''s schema")',
              new.identity, new.host, coalesce('version ' || new.schema_version, 'a version before 5') using errcode = 'PQ005';
    end if;
    return new;
end
$f$;
revoke all on function partitionq.refuse_old_worker() from public;
