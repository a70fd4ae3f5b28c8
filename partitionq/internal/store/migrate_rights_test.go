package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/test/pgtest"
)

// oldRights are the rights that sql/roles.sql of an earlier version gave
// its roles, as far as an upgrade carries them over: a worker (%[1]s), an
// operator (%[2]s) and a role allowed to purge (%[3]s). Each statement runs
// on the schemas of versions from to to (to 0: every later one).
var oldRights = []struct {
	from, to int
	sql      string
}{
	// Before version 4, roles wrote the dead letters and the audit trail.
	{1, 3, `grant select, insert on partitionq.dead_letter to %[1]s;
	        grant select, insert, update on partitionq.dead_letter, partitionq.audit to %[2]s;
	        grant select, delete on partitionq.dead_letter to %[3]s`},
	{3, 4, `grant execute on function partitionq.check_owner(text, text, int, bigint),
	                              partitionq.record_done(text, text, int, bigint, bigint, bigint) to %[1]s`},
	{4, 7, `grant execute on function partitionq.give_up(text, text, text, int, text, bigint[], int[], text[], text[]) to %[1]s`},
	{4, 0, `grant execute on function partitionq.set_aside(text, text, text, int, text, text, bigint[], text, text),
	                              partitionq.record_replay(text, text, text, bigint[], bigint[], text, text, text),
	                              partitionq.record_action(text, text, text, text, text, bigint, text, text) to %[2]s;
	        grant execute on function partitionq.purge_dead_letters(text, text, bigint[], timestamptz, text, text, text) to %[3]s`},
	{5, 0, `grant execute on function partitionq.check_owner(text, text, int, int, bigint),
	                              partitionq.record_done(text, text, int, int, bigint, bigint, bigint),
	                              partitionq.resize_cutover(text, text, text),
	                              partitionq.resize_handoff(text, text, text, int, bigint) to %[1]s`},
	{7, 0, `grant execute on function partitionq.event_fate(text, text, text, text, bigint) to %[2]s`},
	{8, 0, `grant execute on function partitionq.give_up(text, text, text, int, bigint, text, bigint[], int[], text[], text[]) to %[1]s`},
	{11, 16, `grant execute on function partitionq.has_generations(text, text), partitionq.is_generation(text, text, int, int),
	                                partitionq.resizing(text, text, int, int) to %[1]s`},
	{17, 0, `grant execute on function partitionq.has_generations(text, text) to %[1]s`},
}

// rightsAfter are the rights the roles of oldRights have once their
// database is upgraded from version v to the newest: the functions that
// replaced a table right (version 4), a changed signature (give_up,
// version 8) and a new function a role needs (version 11) are granted to
// the roles that had what they replace; a function dropped with its old
// signature (check_owner and record_done, version 5) takes its grants
// with it (sql/roles.sql grants the new ones), and so do functions
// dropped (is_generation and resizing, version 17); every other grant
// stays.
func rightsAfter(v int) []string {
	w := []string{"worker give_up(text,text,text,integer,bigint,text,bigint[],integer[],text[],text[])"}
	if v >= 5 {
		w = append(w, "worker check_owner(text,text,integer,integer,bigint)",
			"worker has_generations(text,text)",
			"worker record_done(text,text,integer,integer,bigint,bigint,bigint)",
			"worker resize_cutover(text,text,text)",
			"worker resize_handoff(text,text,text,integer,bigint)")
	}
	o := []string{"operator record_action(text,text,text,text,text,bigint,text,text)",
		"operator record_replay(text,text,text,bigint[],bigint[],text,text,text)",
		"operator set_aside(text,text,text,integer,text,text,bigint[],text,text)"}
	if v >= 7 {
		o = append(o, "operator event_fate(text,text,text,text,bigint)")
	}
	out := append(append(w, o...), "purger purge_dead_letters(text,text,bigint[],timestamp with time zone,text,text,text)")
	if v < 4 { // select stays: only the writes go
		out = append(out, "worker select on dead_letter", "operator select on dead_letter", "operator select on audit", "purger select on dead_letter")
	}
	slices.Sort(out)
	return out
}

// What the roles of oldRights may do in the database: the functions they
// may call and their rights on the dead letters and the audit trail.
const rightsNow = `
	select r.kind || ' ' || regexp_replace(p.oid::regprocedure::text, '^partitionq\.', '')
	  from pg_proc p cross join lateral aclexplode(p.proacl) a
	  join unnest($1::text[], array['worker', 'operator', 'purger']) r(name, kind) on r.name = pg_get_userbyid(a.grantee)
	 where p.pronamespace = 'partitionq'::regnamespace and a.privilege_type = 'EXECUTE'
	union all
	select r.kind || ' ' || lower(a.privilege_type) || ' on ' || c.relname
	  from pg_class c cross join lateral aclexplode(c.relacl) a
	  join unnest($1::text[], array['worker', 'operator', 'purger']) r(name, kind) on r.name = pg_get_userbyid(a.grantee)
	 where c.relnamespace = 'partitionq'::regnamespace
	order by 1`

// An upgrade from every earlier version keeps what the roles of that
// version may do, moving rights to the functions that replace what they
// had (as each migration says), and losing none to a function's new
// definition (create or replace keeps a function's grants).
func TestMigrationKeepsWhatRolesMayDo(t *testing.T) {
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	ctx := context.Background()
	for v := 1; v < store.Latest(); v++ {
		t.Run(fmt.Sprintf("from version %d", v), func(t *testing.T) {
			b, err := os.ReadFile(fmt.Sprintf("testdata/schema_v%d.sql", v))
			if err != nil {
				t.Fatal(err)
			}
			// Roles are the cluster's: made in the transaction, under names
			// of their own, they go with its rollback.
			suffix := make([]byte, 4)
			_, _ = rand.Read(suffix)
			roles := []string{"pqup_worker_", "pqup_operator_", "pqup_purger_"}
			for i := range roles {
				roles[i] += hex.EncodeToString(suffix)
			}
			pgtest.InTx(t, pool, func(tx pgx.Tx) {
				if _, err := tx.Exec(ctx, string(b)); err != nil {
					t.Fatalf("schema_v%d.sql: %v", v, err)
				}
				for _, r := range roles {
					if _, err := tx.Exec(ctx, "create role "+r+" nologin"); err != nil {
						t.Fatal(err)
					}
				}
				for _, g := range oldRights {
					if g.from <= v && (g.to == 0 || v <= g.to) {
						if _, err := tx.Exec(ctx, fmt.Sprintf(g.sql, roles[0], roles[1], roles[2])); err != nil {
							t.Fatalf("rights of version %d: %v\n%s", v, err, g.sql)
						}
					}
				}
				if err := store.Migrate(ctx, tx); err != nil {
					t.Fatalf("migrate from version %d: %v", v, err)
				}
				rows, err := tx.Query(ctx, rightsNow, roles)
				if err != nil {
					t.Fatal(err)
				}
				got, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				if want := rightsAfter(v); !slices.Equal(got, want) {
					t.Errorf("rights after the upgrade from version %d:\n%s", v, diffLines(strings.Join(want, "\n"), strings.Join(got, "\n")))
				}
			})
		})
	}
}
