-- Workers say which schema version they were built for
-- (worker.schema_version). A worker of partitionq before v0.3 says
-- nothing: the trigger worker_version on partitionq.worker refuses it with
-- this function when it registers or renews its lease, with an error
-- naming the fix (it does not know generations, and would read an old
-- generation's slots past their cutover).
create or replace function partitionq.refuse_old_worker() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $f$
begin
    if new.schema_version is null or new.schema_version < 5 then
        raise exception 'partitionq''s schema in this database is version 5 or newer, which workers of partitionq before v0.3 do not know (they cannot follow a resize): stop this worker (%, on %) and run partitionq v0.3 or later (docs/operations.md, "Upgrading partitionq''s schema")',
              new.identity, new.host using errcode = 'PQ005';
    end if;
    return new;
end
$f$;
revoke all on function partitionq.refuse_old_worker() from public;
