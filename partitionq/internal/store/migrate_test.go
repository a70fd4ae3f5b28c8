package store_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/test/pgtest"
)

func TestMigrationsAreNumberedInOrder(t *testing.T) {
	ms := store.Migrations()
	if len(ms) < 4 {
		t.Fatalf("%d migrations, want at least the 4 of v0.2", len(ms))
	}
	for i, m := range ms {
		if m.Version != i+1 || !strings.HasPrefix(m.Name, fmt.Sprintf("%04d_", i+1)) {
			t.Errorf("migration %d is %s (version %d)", i+1, m.Name, m.Version)
		}
		if !strings.HasPrefix(m.SQL, "-- Version ") {
			t.Errorf("%s does not open with a -- Version comment saying what it changes", m.Name)
		}
	}
	if store.Latest() != len(ms) {
		t.Errorf("Latest() = %d with %d migrations", store.Latest(), len(ms))
	}
}

// fingerprint describes partitionq's schema as the catalog has it, one
// line per fact, sorted: every relation and its storage options and
// rights, column, constraint, index, sequence, trigger and comment, and
// every function with its whole definition (pg_get_functiondef: arguments,
// result, language, volatility, SECURITY DEFINER, settings, body) and who
// may call it. Rights name the schema's owner "owner", so that two
// databases made by one role compare equal. Two schemas with the same
// fingerprint are the same to every query and every role.
func fingerprint(t *testing.T, ctx context.Context, q pgx.Tx) string {
	t.Helper()
	rows, err := q.Query(ctx, fingerprintSQL)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

const fingerprintSQL = `
	with acl(objid, line) as (
		select c.oid, string_agg(case when a.grantee = 0 then 'public' when a.grantee = c.relowner then 'owner' else pg_get_userbyid(a.grantee) end
		                         || ':' || a.privilege_type || case when a.is_grantable then '*' else '' end, ',' order by 1)
		  from pg_class c cross join lateral aclexplode(c.relacl) a
		 where c.relnamespace = 'partitionq'::regnamespace group by c.oid
		union all
		select p.oid, string_agg(case when a.grantee = 0 then 'public' when a.grantee = p.proowner then 'owner' else pg_get_userbyid(a.grantee) end
		                         || ':' || a.privilege_type || case when a.is_grantable then '*' else '' end, ',' order by 1)
		  from pg_proc p cross join lateral aclexplode(p.proacl) a
		 where p.pronamespace = 'partitionq'::regnamespace group by p.oid)
	select 'relation ' || c.relname || ' kind=' || c.relkind::text || ' options=' || coalesce(array_to_string(c.reloptions, ','), '')
	       || ' acl=' || case when c.relacl is null then 'default' else coalesce((select line from acl where objid = c.oid), 'none') end
	  from pg_class c where c.relnamespace = 'partitionq'::regnamespace
	union all
	select 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
	       || case when a.attnotnull then ' not null' else '' end
	       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
	       || case when a.attcollation <> t.typcollation then ' collate ' || a.attcollation::regcollation::text else '' end
	       || case when a.attidentity <> ''::"char" then ' identity ' || a.attidentity::text else '' end
	       || case when a.attgenerated <> ''::"char" then ' generated ' || a.attgenerated::text else '' end
	       || case when a.attacl is not null then ' acl=' || a.attacl::text else '' end
	  from pg_class c join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
	  join pg_type t on t.oid = a.atttypid
	  left join pg_attrdef d on d.adrelid = c.oid and d.adnum = a.attnum
	 where c.relnamespace = 'partitionq'::regnamespace and c.relkind = 'r'
	union all
	select 'constraint ' || r.relname || '.' || k.conname || ' ' || pg_get_constraintdef(k.oid)
	  from pg_constraint k join pg_class r on r.oid = k.conrelid where r.relnamespace = 'partitionq'::regnamespace
	union all
	select 'index ' || pg_get_indexdef(i.indexrelid)
	  from pg_index i join pg_class r on r.oid = i.indrelid where r.relnamespace = 'partitionq'::regnamespace
	union all
	select 'sequence ' || c.relname || ' ' || format_type(s.seqtypid, null) || ' start=' || s.seqstart || ' increment=' || s.seqincrement
	       || ' min=' || s.seqmin || ' max=' || s.seqmax || ' cache=' || s.seqcache || ' cycle=' || s.seqcycle
	       || coalesce(' owned by ' || (select r.relname || '.' || a.attname from pg_depend d
	                                      join pg_class r on r.oid = d.refobjid
	                                      join pg_attribute a on a.attrelid = d.refobjid and a.attnum = d.refobjsubid
	                                     where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.deptype in ('a', 'i')), '')
	  from pg_class c join pg_sequence s on s.seqrelid = c.oid where c.relnamespace = 'partitionq'::regnamespace
	union all
	select 'trigger ' || pg_get_triggerdef(g.oid) || ' enabled=' || g.tgenabled::text
	  from pg_trigger g join pg_class r on r.oid = g.tgrelid where r.relnamespace = 'partitionq'::regnamespace and not g.tgisinternal
	union all
	select 'comment ' || pg_describe_object(d.classoid, d.objoid, d.objsubid) || ' ' || d.description
	  from pg_description d
	 where (d.classoid = 'pg_class'::regclass and d.objoid in (select oid from pg_class where relnamespace = 'partitionq'::regnamespace))
	    or (d.classoid = 'pg_proc'::regclass and d.objoid in (select oid from pg_proc where pronamespace = 'partitionq'::regnamespace))
	union all
	select 'type ' || t.typname || ' kind=' || t.typtype::text
	  from pg_type t where t.typnamespace = 'partitionq'::regnamespace and t.typrelid = 0 and t.typelem = 0
	union all
	select 'function ' || p.oid::regprocedure::text || ' md5=' || md5(pg_get_functiondef(p.oid))
	       || ' acl=' || case when p.proacl is null then 'default' else coalesce((select line from acl where objid = p.oid), 'none') end
	  from pg_proc p where p.pronamespace = 'partitionq'::regnamespace
	order by 1`

// oldRows are the rows a database holds at an earlier version, as the
// code of that version wrote them: each statement runs on the schemas of
// versions from to to (to 0: every later one).
var oldRows = []struct {
	from, to int
	sql      string
}{
	{1, 0, `insert into partitionq.failure (queue, consumer, ev_id, attempts, last_error, next_attempt_at) values ('q', 'g#0/2', 7, 3, 'boom', now())`},
	{1, 0, `insert into partitionq.dead_letter (queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts, reason, actor)
	        values ('q', 'g', 1, 5, now(), 'FileCreated', '{"a":1}', 'tenant-1', 2, 'max_attempts', 'worker')`},
	{1, 0, `insert into partitionq.audit (actor, action, queue, grp, key, ev_id, reason, outcome) values ('alice', 'skip', 'q', 'g', 'tenant-1', 5, 'bad', 'skipped')`},
	// From version 5 on, a worker says its schema version (or is refused).
	{3, 4, `insert into partitionq.worker (identity, lease_until) values ('w1', now())`},
	// From version 17 on, a worker built for an earlier one is refused.
	{5, 16, `insert into partitionq.worker (identity, lease_until, schema_version) values ('w1', now(), 5)`},
	{17, 0, `insert into partitionq.worker (identity, lease_until, schema_version) values ('w1', now(), 17)`},
	{3, 16, `insert into partitionq.slot (queue, grp, slot, n, worker_id, epoch) select 'q', 'g', s, 2, (select min(id) from partitionq.worker), 4 from generate_series(0, 1) s`},
	// From version 5 on, progress, completions and rates name their slot's
	// N; from version 17 on, their slot's generation instead.
	{3, 4, `insert into partitionq.slot_progress (queue, grp, slot, batch_id, done_below, handled) values ('q', 'g', 0, 11, 100, 42)`},
	{5, 16, `insert into partitionq.slot_progress (queue, grp, n, slot, batch_id, done_below, handled) values ('q', 'g', 2, 0, 11, 100, 42)`},
	{3, 4, `insert into partitionq.slot_done (queue, grp, slot, batch_id, ev_id) values ('q', 'g', 1, 12, 9)`},
	{5, 16, `insert into partitionq.slot_done (queue, grp, n, slot, batch_id, ev_id) values ('q', 'g', 2, 1, 12, 9)`},
	{4, 4, `insert into partitionq.slot_rate (queue, grp, slot, sec, handled, failed) values ('q', 'g', 0, 1764547200, 10, 1)`},
	{5, 16, `insert into partitionq.slot_rate (queue, grp, n, slot, sec, handled, failed) values ('q', 'g', 2, 0, 1764547200, 10, 1)`},
	{17, 0, `insert into partitionq.slot (queue, grp, generation, slot, n, worker_id, epoch)
	         select 'q', 'g', 1, s, 2, (select min(id) from partitionq.worker), 4 from generate_series(0, 1) s`},
	{17, 0, `insert into partitionq.slot_progress (queue, grp, generation, slot, batch_id, done_below, handled) values ('q', 'g', 1, 0, 11, 100, 42)`},
	{17, 0, `insert into partitionq.slot_done (queue, grp, generation, slot, batch_id, ev_id) values ('q', 'g', 1, 1, 12, 9)`},
	{17, 0, `insert into partitionq.slot_rate (queue, grp, generation, slot, sec, handled, failed) values ('q', 'g', 1, 0, 1764547200, 10, 1)`},
	{5, 0, `insert into partitionq.generation (queue, grp, slots, number, parent_slots, parent_subs, resize_txid, resize_after, cutover_tick, actor, reason)
	        values ('q', 'g', 2, 1, null, '{}', null, null, null, '', 'the group as set up'),
	               ('q', 'h', 4, 2, 2, '{3,4}', 1234, 56, 57, 'alice', 'more')`},
	{6, 0, `insert into partitionq.queue_config (queue, dedup_window) values ('q', '2 hours')`},
	{6, 0, `insert into partitionq.dedup (queue, dedup_id, key, ev_id, sent_at, expires_at, hits, last_hit_at)
	        values ('q', 'order-1', 'tenant-1', 5, now(), now() + interval '1 hour', 2, now())`},
	{7, 0, `insert into partitionq.census (queue, n, tick_id, counts, firsts, owned) values ('q', 2, 8, '{3,4}', '{null,null}', '{"3": 1}')`},
	{7, 0, `insert into partitionq.census_state (queue, n, base, tick_id) values ('q', 2, 7, 8)`},
}

// keptRows reads back the rows of oldRows that an upgrade keeps, as
// texts: per table (there since version since), the columns it has had
// from that version on.
var keptRows = []struct {
	since int
	sql   string
}{
	{1, `select string_agg(concat_ws(',', queue, consumer, ev_id, attempts, last_error), ';' order by ev_id) from partitionq.failure`},
	{1, `select string_agg(concat_ws(',', id, queue, grp, slot, ev_id, ev_type, ev_data, key, attempts, reason, actor), ';' order by id) from partitionq.dead_letter`},
	{1, `select string_agg(concat_ws(',', id, actor, action, key, ev_id, reason, outcome), ';' order by id) from partitionq.audit`},
	{3, `select string_agg(concat_ws(',', id, identity), ';' order by id) from partitionq.worker`},
	{3, `select string_agg(concat_ws(',', queue, grp, slot, n, worker_id, epoch), ';' order by slot) from partitionq.slot`},
	{3, `select string_agg(concat_ws(',', queue, grp, slot, batch_id, done_below, handled), ';' order by slot) from partitionq.slot_progress`},
	{3, `select string_agg(concat_ws(',', queue, grp, slot, batch_id, ev_id), ';' order by ev_id) from partitionq.slot_done`},
	{3, `select string_agg(name, ';' order by name) from partitionq.ticker_turn`},
	{4, `select string_agg(concat_ws(',', queue, grp, slot, sec, handled, failed), ';' order by slot) from partitionq.slot_rate`},
	{5, `select string_agg(concat_ws(',', queue, grp, slots, number, parent_slots, parent_subs, resize_txid, resize_after, cutover_tick, actor, reason), ';' order by grp)
	       from partitionq.generation`},
	{6, `select string_agg(concat_ws(',', queue, dedup_window), ';' order by queue) from partitionq.queue_config`},
	{6, `select string_agg(concat_ws(',', queue, dedup_id, key, ev_id, hits), ';' order by dedup_id) from partitionq.dedup`},
	{7, `select string_agg(concat_ws(',', queue, n, tick_id, counts, firsts, owned), ';' order by tick_id) from partitionq.census`},
	{7, `select string_agg(concat_ws(',', queue, n, base, tick_id), ';' order by n) from partitionq.census_state`},
}

// writeOldRows writes the rows of oldRows that a schema at version v holds.
func writeOldRows(t *testing.T, ctx context.Context, tx pgx.Tx, v int) {
	t.Helper()
	for _, r := range oldRows {
		if r.from <= v && (r.to == 0 || v <= r.to) {
			if _, err := tx.Exec(ctx, r.sql); err != nil {
				t.Fatalf("rows of version %d: %v\n%s", v, err, r.sql)
			}
		}
	}
}

// readKeptRows reads the rows of the tables a schema at version v has.
func readKeptRows(t *testing.T, ctx context.Context, tx pgx.Tx, v int) []string {
	t.Helper()
	var out []string
	for _, k := range keptRows {
		if k.since > v {
			continue
		}
		var s *string
		if err := tx.QueryRow(ctx, k.sql).Scan(&s); err != nil {
			t.Fatalf("%v\n%s", err, k.sql)
		}
		if s == nil {
			t.Fatalf("no rows: %s", k.sql)
		}
		out = append(out, *s)
	}
	return out
}

// Every earlier schema version, rebuilt from its frozen DDL
// (testdata/schema_vN.sql) and holding rows, is upgraded in place to
// exactly the schema a new database gets, keeping its rows.
func TestMigrationUpgradesEveryEarlierVersion(t *testing.T) {
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	fresh := freshFingerprint(t, pool)
	for v := 1; v < store.Latest(); v++ {
		t.Run(fmt.Sprintf("from version %d", v), func(t *testing.T) {
			if got := upgradeFrozen(t, pool, v); got != fresh {
				t.Errorf("schema upgraded from version %d differs from a new one:\n%s", v, diffLines(fresh, got))
			}
		})
	}
}

const freezeLatest = "go test ./partitionq/internal/store -run TestLatestVersionIsFrozen -update"

// The newest version is frozen too (testdata/schema_vN.sql, written when
// the version is made), and a database at it is the schema a new one
// gets. Migrate does nothing to a database at the newest version: a
// function changed without a new version would reach new databases only.
func TestLatestVersionIsFrozen(t *testing.T) {
	latest := store.Latest()
	path := fmt.Sprintf("testdata/schema_v%d.sql", latest)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if !*update {
			t.Fatalf("%s is missing: each version is frozen when it is made, for the upgrade test of the next and to catch a function changed without a new version; write it with `%s`",
				path, freezeLatest)
		}
		freeze(t, path, latest)
	} else if err != nil {
		t.Fatal(err)
	}
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	fresh := freshFingerprint(t, pool)
	if got := upgradeFrozen(t, pool, latest); got != fresh {
		t.Errorf("a database at version %[1]d, the newest (%[2]s), differs from a new one: databases already at version %[1]d would never get this change, "+
			"since the schema is migrated only when its version moves up. A change to a function needs a new schema version: add migration/%04[3]d_<what>.sql, "+
			"which may hold only its \"-- Version %[3]d:\" comment naming the functions that changed and why, then freeze it with `%[4]s`. "+
			"(If version %[1]d is new on your branch, never released, delete %[2]s and freeze it again instead.)\n%[5]s",
			latest, path, latest+1, freezeLatest, diffLines(fresh, got))
	}
}

// freeze writes the schema of a new database, as sql/schema.sql shows
// it, as the frozen schema of version v.
func freeze(t *testing.T, path string, v int) {
	t.Helper()
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	ctx := context.Background()
	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if err := store.Migrate(ctx, tx); err != nil {
			t.Fatal(err)
		}
		body := describeSchema(t, ctx, tx)
		header := fmt.Sprintf(`-- partitionq's schema at version %d, for the migration tests: what
-- sql/schema.sql showed when the version was made, on PostgreSQL %d,
-- written by
--   %s
-- Frozen: do not edit.

`, v, serverMajor(t, ctx, tx), freezeLatest)
		if err := os.WriteFile(path, []byte(header+body), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("froze version %d in %s", v, path)
}

// freshFingerprint is the fingerprint of a new database's schema.
func freshFingerprint(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	var fresh string
	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if err := store.Migrate(ctx, tx); err != nil {
			t.Fatal(err)
		}
		fresh = fingerprint(t, ctx, tx)
	})
	for _, want := range []string{"column dead_letter.key text not null", "function partitionq.give_up(", "trigger CREATE TRIGGER worker_version", "acl=owner:EXECUTE"} {
		if !strings.Contains(fresh, want) {
			t.Fatalf("the fresh schema's fingerprint misses %q:\n%s", want, fresh)
		}
	}
	return fresh
}

// upgradeFrozen rebuilds version v from its frozen schema, writes the
// rows of that version, migrates it and returns its fingerprint; it
// checks that the rows are kept.
func upgradeFrozen(t *testing.T, pool *pgxpool.Pool, v int) string {
	t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(fmt.Sprintf("testdata/schema_v%d.sql", v))
	if err != nil {
		t.Fatalf("%v: every earlier version needs its schema, frozen when it was the newest", err)
	}
	var got string
	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if _, err := tx.Exec(ctx, string(b)); err != nil {
			t.Fatalf("schema_v%d.sql: %v", v, err)
		}
		writeOldRows(t, ctx, tx, v)
		before := readKeptRows(t, ctx, tx, v)
		if got, err := store.Current(ctx, tx); err != nil || got != v {
			t.Fatalf("version before: %d, %v", got, err)
		}
		if err := store.Migrate(ctx, tx); err != nil {
			t.Fatalf("migrate from version %d: %v", v, err)
		}
		if got, err := store.Current(ctx, tx); err != nil || got != store.Latest() {
			t.Fatalf("version after: %d, %v; want %d", got, err, store.Latest())
		}
		got = fingerprint(t, ctx, tx)
		if after := readKeptRows(t, ctx, tx, v); !slices.Equal(after, before) {
			t.Errorf("the upgrade from version %d changed the rows:\nbefore %q\nafter  %q", v, before, after)
		}
	})
	return got
}

func TestMigrateRefusesANewerSchema(t *testing.T) {
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	ctx := context.Background()
	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if err := store.Migrate(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if err := store.Check(ctx, tx); err != nil {
			t.Fatalf("check after migrate: %v", err)
		}
		if _, err := tx.Exec(ctx, `update partitionq.schema_version set version = $1`, store.Latest()+1); err != nil {
			t.Fatal(err)
		}
		for name, err := range map[string]error{"Migrate": store.Migrate(ctx, tx), "Check": store.Check(ctx, tx)} {
			var ve *store.SchemaVersionError
			if !errors.As(err, &ve) || ve.Have != store.Latest()+1 || ve.Want != store.Latest() {
				t.Fatalf("%s on a newer schema: %v", name, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "newer than this partitionq knows") || !strings.Contains(msg, "upgrade this program") {
				t.Errorf("%s's error does not say what to do: %s", name, msg)
			}
		}
	})
	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if err := store.Check(ctx, tx); !errors.Is(err, store.ErrSchemaMissing) {
			t.Fatalf("check without a schema: %v", err)
		}
		b, err := os.ReadFile("testdata/schema_v3.sql")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, string(b)); err != nil {
			t.Fatal(err)
		}
		var ve *store.SchemaVersionError
		if err := store.Check(ctx, tx); !errors.As(err, &ve) || ve.Have != 3 || !strings.Contains(err.Error(), "run partitionq setup once") {
			t.Fatalf("check of an older schema: %v", err)
		}
	})
}

// diffLines lists the lines only in a and only in b.
func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ia, ib := in(a), in(b)
	var out []string
	for l := range ia {
		if !ib[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range ib {
		if !ia[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// Version 17 keys the slot rows by generation: a group in the middle of a
// resize (generation 1 with 2 slots, generation 2 with 4) keeps each row
// with its generation's number; a group set up before generations were
// recorded has its rows in generation 1; a row of an N none of its group's
// generations has (an ended one's) is dropped. The resize's generation
// names its parent by number.
func TestMigrationNumbersTheSlotRowsOfEachGeneration(t *testing.T) {
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	ctx := context.Background()
	b, err := os.ReadFile("testdata/schema_v16.sql")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if _, err := tx.Exec(ctx, string(b)); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `
			insert into partitionq.generation (queue, grp, slots, number, parent_slots, resize_txid, resize_after)
			values ('q', 'g', 2, 1, null, null, null), ('q', 'g', 4, 2, 2, 1234, 56);
			insert into partitionq.slot (queue, grp, n, slot, epoch)
			select 'q', 'g', 2, s, 7 from generate_series(0, 1) s
			union all select 'q', 'g', 4, s, 2::bigint << 32 from generate_series(0, 3) s
			union all select 'q', 'old', 3, s, 1 from generate_series(0, 2) s;
			insert into partitionq.slot_progress (queue, grp, n, slot, batch_id, handled)
			values ('q', 'g', 2, 0, 11, 1), ('q', 'g', 4, 3, 12, 2), ('q', 'g', 8, 5, 13, 3), ('q', 'old', 3, 2, 14, 4);
			insert into partitionq.slot_done (queue, grp, n, slot, batch_id, ev_id) values ('q', 'g', 2, 1, 11, 9), ('q', 'g', 4, 1, 12, 10);
			insert into partitionq.slot_rate (queue, grp, n, slot, sec, handled, failed) values ('q', 'g', 4, 2, 1764547200, 5, 0), ('q', 'old', 3, 0, 1764547200, 6, 0)`); err != nil {
			t.Fatal(err)
		}
		if err := store.Migrate(ctx, tx); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ sql, want string }{
			{`select string_agg(concat_ws(',', grp, generation, n, slot, epoch), ';' order by grp, generation, slot) from partitionq.slot`,
				"g,1,2,0,7;g,1,2,1,7;g,2,4,0,8589934592;g,2,4,1,8589934592;g,2,4,2,8589934592;g,2,4,3,8589934592;old,1,3,0,1;old,1,3,1,1;old,1,3,2,1"},
			{`select string_agg(concat_ws(',', grp, generation, slot, batch_id, handled), ';' order by grp, generation, slot) from partitionq.slot_progress`,
				"g,1,0,11,1;g,2,3,12,2;old,1,2,14,4"},
			{`select string_agg(concat_ws(',', grp, generation, slot, ev_id), ';' order by ev_id) from partitionq.slot_done`, "g,1,1,9;g,2,1,10"},
			{`select string_agg(concat_ws(',', grp, generation, slot, handled), ';' order by grp) from partitionq.slot_rate`, "g,2,2,5;old,1,0,6"},
			{`select string_agg(concat_ws(',', slots, number, parent_number), ';' order by number) from partitionq.generation`, "2,1;4,2,1"},
		} {
			var got string
			if err := tx.QueryRow(ctx, c.sql).Scan(&got); err != nil {
				t.Fatalf("%v\n%s", err, c.sql)
			}
			if got != c.want {
				t.Errorf("%s\n got  %s\n want %s", c.sql, got, c.want)
			}
		}
	})
}

// A worker built for a schema version before 17 keys the slot rows by N: it
// is refused when it registers (and when it renews: the same trigger), with
// an error that names the version it was built for and the fix.
func TestAWorkerOfAnEarlierVersionIsRefused(t *testing.T) {
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	ctx := context.Background()
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		version *int
		says    string
	}{
		{new(16), "built for version 16"},
		{nil, "built for a version before 5"},
	} {
		_, err := pool.Exec(ctx, `insert into partitionq.worker (identity, lease_until, schema_version) values ('old', now(), $1)`, c.version)
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "run a partitionq that knows schema version 17") {
			t.Errorf("a worker of schema version %v registered: %v; want it refused, saying %q", c.version, err, c.says)
		}
	}
	var id int64
	if err := pool.QueryRow(ctx, `insert into partitionq.worker (identity, lease_until, schema_version) values ('new', now(), $1) returning id`,
		store.Latest()).Scan(&id); err != nil {
		t.Fatalf("a worker of the newest version: %v", err)
	}
	if _, err := pool.Exec(ctx, `update partitionq.worker set schema_version = 16, lease_until = now() where id = $1`, id); err == nil {
		t.Error("a renewal of a worker of schema version 16 went through")
	}
}
