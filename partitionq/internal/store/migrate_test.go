package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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

// fingerprint describes partitionq's schema as the catalog has it: every
// column, constraint, index, sequence and function (with its text and
// settings), one line each, sorted. Two schemas with the same fingerprint
// are the same to every query.
func fingerprint(t *testing.T, ctx context.Context, q pgx.Tx) string {
	t.Helper()
	rows, err := q.Query(ctx, `
		select 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		       || case when a.attnotnull then ' not null' else '' end
		       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
		  from pg_class c join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
		  left join pg_attrdef d on d.adrelid = c.oid and d.adnum = a.attnum
		 where c.relnamespace = 'partitionq'::regnamespace and c.relkind = 'r'
		union all
		select 'constraint ' || r.relname || '.' || k.conname || ' ' || pg_get_constraintdef(k.oid)
		  from pg_constraint k join pg_class r on r.oid = k.conrelid where r.relnamespace = 'partitionq'::regnamespace
		union all
		select 'index ' || pg_get_indexdef(i.indexrelid)
		  from pg_index i join pg_class r on r.oid = i.indrelid where r.relnamespace = 'partitionq'::regnamespace
		union all
		select 'sequence ' || c.relname from pg_class c where c.relnamespace = 'partitionq'::regnamespace and c.relkind = 'S'
		union all
		select 'function ' || p.oid::regprocedure::text || ' definer=' || p.prosecdef || ' config=' || coalesce(array_to_string(p.proconfig, ','), '')
		       || ' md5=' || md5(p.prosrc)
		  from pg_proc p where p.pronamespace = 'partitionq'::regnamespace
		order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// Data written under each earlier version, with what each version had.
var oldData = map[int][]string{
	1: {
		`insert into partitionq.failure (queue, consumer, ev_id, attempts, last_error, next_attempt_at) values ('q', 'g#0/2', 7, 3, 'boom', now())`,
		`insert into partitionq.dead_letter (queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts, reason, actor)
		 values ('q', 'g', 1, 5, now(), 'FileCreated', '{"a":1}', 'tenant-1', 2, 'max_attempts', 'worker')`,
		`insert into partitionq.audit (actor, action, queue, grp, key, ev_id, reason, outcome) values ('alice', 'skip', 'q', 'g', 'tenant-1', 5, 'bad', 'skipped')`,
	},
	3: {
		`insert into partitionq.worker (identity, lease_until) values ('w1', now())`,
		`insert into partitionq.slot (queue, grp, slot, n, worker_id, epoch) select 'q', 'g', s, 2, (select min(id) from partitionq.worker), 4 from generate_series(0, 1) s`,
		`insert into partitionq.slot_progress (queue, grp, slot, batch_id, done_below, handled) values ('q', 'g', 0, 11, 100, 42)`,
		`insert into partitionq.slot_done (queue, grp, slot, batch_id, ev_id) values ('q', 'g', 1, 12, 9)`,
	},
	4: {
		`insert into partitionq.slot_rate (queue, grp, slot, sec, handled, failed) values ('q', 'g', 0, 1764547200, 10, 1)`,
	},
}

// What an upgrade must keep: every row written above, as a text.
const keptData = `
	select concat_ws(' | ',
		(select string_agg(concat_ws(',', queue, consumer, ev_id, attempts, last_error), ';' order by ev_id) from partitionq.failure),
		(select string_agg(concat_ws(',', id, queue, grp, slot, ev_id, ev_type, ev_data, key, attempts, reason, actor), ';' order by id) from partitionq.dead_letter),
		(select string_agg(concat_ws(',', id, actor, action, key, ev_id, reason, outcome), ';' order by id) from partitionq.audit))`

// Every earlier schema version, rebuilt from the DDL of the commit that
// wrote it (testdata/schema_vN.sql) and holding data, is upgraded in place
// to exactly the schema a new database gets, keeping its rows.
func TestMigrationUpgradesEveryEarlierVersion(t *testing.T) {
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	ctx := context.Background()

	var fresh string
	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if err := store.Migrate(ctx, tx); err != nil {
			t.Fatal(err)
		}
		fresh = fingerprint(t, ctx, tx)
	})
	if !strings.Contains(fresh, "column dead_letter.key text not null") {
		t.Fatalf("the fresh schema's fingerprint misses what it should show:\n%s", fresh)
	}

	for v := 1; v <= 4; v++ {
		t.Run(fmt.Sprintf("from version %d", v), func(t *testing.T) {
			b, err := os.ReadFile(fmt.Sprintf("testdata/schema_v%d.sql", v))
			if err != nil {
				t.Fatal(err)
			}
			pgtest.InTx(t, pool, func(tx pgx.Tx) {
				if _, err := tx.Exec(ctx, string(b)); err != nil {
					t.Fatalf("schema_v%d.sql: %v", v, err)
				}
				for w := 1; w <= v; w++ {
					for _, sql := range oldData[w] {
						if _, err := tx.Exec(ctx, sql); err != nil {
							t.Fatalf("data of version %d: %v", w, err)
						}
					}
				}
				var before string
				if err := tx.QueryRow(ctx, keptData).Scan(&before); err != nil {
					t.Fatal(err)
				}
				if got, err := store.Current(ctx, tx); err != nil || got != v {
					t.Fatalf("version before: %d, %v", got, err)
				}
				if err := store.Migrate(ctx, tx); err != nil {
					t.Fatalf("migrate from version %d: %v", v, err)
				}
				if got, err := store.Current(ctx, tx); err != nil || got != store.Latest() {
					t.Fatalf("version after: %d, %v; want %d", got, err, store.Latest())
				}
				if got := fingerprint(t, ctx, tx); got != fresh {
					t.Errorf("schema upgraded from version %d differs from a new one:\n%s", v, diffLines(fresh, got))
				}
				var after string
				if err := tx.QueryRow(ctx, keptData).Scan(&after); err != nil {
					t.Fatal(err)
				}
				if after != before {
					t.Errorf("the upgrade changed the rows:\nbefore %s\nafter  %s", before, after)
				}
			})
		})
	}
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
		if err := store.MigrateTo(ctx, tx, 3); err != nil {
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
