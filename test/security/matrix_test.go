package security_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq"
)

// matrix is what each role of sql/roles.sql may do on every object of
// partitionq's schema. Tables: r select, a insert, w update (any column), d
// delete, D truncate; sequences: U usage, w update, r select; functions: X
// execute; the schema: U usage, C create. An object of the schema missing
// here fails TestPrivilegeMatrix: a new table or function needs its line.
var matrix = map[string]map[string]string{
	// producer, worker, operator, viewer
	"schema partitionq":           {"producer": "U", "worker": "U", "operator": "U", "viewer": "U"},
	"table schema_version":        {"producer": "r", "worker": "r", "operator": "r", "viewer": "r"},
	"table failure":               {"worker": "rawd", "operator": "rwd", "viewer": "r"},
	"table dead_letter":           {"operator": "r", "viewer": "r"},
	"table audit":                 {"operator": "r", "viewer": "r"},
	"table worker":                {"worker": "rawd", "operator": "r", "viewer": "r"},
	"table slot":                  {"worker": "raw", "operator": "r", "viewer": "r"},
	"table slot_progress":         {"worker": "raw", "operator": "r", "viewer": "r"},
	"table slot_done":             {"worker": "rad", "operator": "rd", "viewer": "r"},
	"table slot_rate":             {"worker": "rawd", "operator": "r", "viewer": "r"},
	"table ticker_turn":           {},
	"table dedup":                 {"operator": "r", "viewer": "r"},
	"table queue_config":          {"operator": "r", "viewer": "r"},
	"sequence dead_letter_id_seq": {},
	"sequence audit_id_seq":       {},
	"sequence worker_id_seq":      {"worker": "U"},
	"function check_owner":        {"worker": "X"},
	"function record_done":        {"worker": "X"},
	"function give_up":            {"worker": "X"},
	"function set_aside":          {"operator": "X"},
	"function record_replay":      {"operator": "X"},
	"function record_action":      {"operator": "X"},
	"function purge_dead_letters": {},
	"function slot_count":         {},
	"function event_fate":         {"operator": "X"},
	"function census":             {"worker": "X", "operator": "X", "viewer": "X"},
	"function census_all":         {},
	"function group_backlog":      {"worker": "X", "operator": "X", "viewer": "X"},
	"function engine_snap":        {},
	"function group_keys":         {"worker": "X", "operator": "X", "viewer": "X"},
	"table census":                {"operator": "r", "viewer": "r"},
	"table census_state":          {"operator": "r", "viewer": "r"},
	"function engine_events":      {},
	"function engine_own_event":   {},
	"function engine_own_events":  {},
	"function dedup_claim":        {"producer": "X"},
	"function dedup_record":       {"producer": "X"},
	"function expire_dedup":       {},
	// Resizing (schema version 5): the owner resizes; workers drive the cutover
	// and hand their old slots off; every reader sees the generations.
	"table generation":                  {"worker": "r", "operator": "r", "viewer": "r"},
	"function resize":                   {},
	"function resize_abort":             {},
	"function resize_cutover":           {"worker": "X"},
	"function resize_handoff":           {"worker": "X"},
	"function engine_sub":               {},
	"function engine_first_tick_seeing": {},
	"function ensure_generation":        {},
	"function refuse_old_worker":        {},
	// What a worker's claim asks of the generations (schema version 11).
	"function has_generations": {"worker": "X"},
	// Any language (schema version 15): a send in SQL, a handler's fence.
	"function send":  {"producer": "X"},
	"function fence": {"worker": "X"},
	// Run handlers (schema version 16): a TxRunHandler's run recorded done.
	"function record_done_all": {"worker": "X"},
	// The ownership check the three above share (schema version 17),
	// called as the schema's owner.
	"function owner_generation": {},
}

// privileges reads what role may do on every object of partitionq's schema
// (PostgreSQL's own has_*_privilege, role memberships included).
func privileges(t *testing.T, ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, role string) map[string]string {
	t.Helper()
	rows, err := db.Query(ctx, `
		select 'schema partitionq', concat(case when has_schema_privilege($1, 'partitionq', 'usage') then 'U' end,
		                                   case when has_schema_privilege($1, 'partitionq', 'create') then 'C' end)
		union all
		select 'table ' || c.relname, concat(case when has_table_privilege($1, c.oid, 'select') then 'r' end,
		                                     case when has_table_privilege($1, c.oid, 'insert') then 'a' end,
		                                     case when has_any_column_privilege($1, c.oid, 'update') then 'w' end,
		                                     case when has_table_privilege($1, c.oid, 'delete') then 'd' end,
		                                     case when has_table_privilege($1, c.oid, 'truncate') then 'D' end)
		  from pg_class c where c.relnamespace = 'partitionq'::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'f')
		union all
		select 'sequence ' || c.relname, concat(case when has_sequence_privilege($1, c.oid, 'usage') then 'U' end,
		                                        case when has_sequence_privilege($1, c.oid, 'update') then 'w' end,
		                                        case when has_sequence_privilege($1, c.oid, 'select') then 'r' end)
		  from pg_class c where c.relnamespace = 'partitionq'::regnamespace and c.relkind = 'S'
		union all
		select 'function ' || p.proname, case when has_function_privilege($1, p.oid, 'execute') then 'X' else '' end
		  from pg_proc p where p.pronamespace = 'partitionq'::regnamespace`, role)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var obj, priv string
		if err := rows.Scan(&obj, &priv); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[obj]; dup {
			t.Fatalf("%s is overloaded: the matrix names functions by name; name the new one otherwise", obj)
		}
		out[obj] = priv
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkMatrix compares the roles' privileges with the matrix.
func checkMatrix(t *testing.T, e *env) {
	t.Helper()
	for _, r := range roleNames {
		got := privileges(t, e.ctx, e.admin, e.group(r))
		for obj, priv := range got {
			want, known := matrix[obj]
			if !known {
				t.Errorf("%s is not in the privilege matrix of test/security: add what each role may do on it", obj)
				continue
			}
			if priv != want[r] {
				t.Errorf("%s on %s: has %q, want %q", r, obj, priv, want[r])
			}
		}
		for obj := range matrix {
			if _, ok := got[obj]; !ok {
				t.Errorf("%s of the matrix is not in partitionq's schema", obj)
			}
		}
	}
}

// Every table, sequence and function of partitionq's schema, for each role
// of sql/roles.sql: exactly what the matrix says. In particular no role
// writes the dead letters or the audit trail directly, and each record
// function is the role's whose job it records.
func TestPrivilegeMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	checkMatrix(t, e)
}

// record is one row of the dead letters or the audit trail, as JSON.
func records(t *testing.T, ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) string {
	t.Helper()
	var s string
	// The columns of version 3 (later versions add some, filled or null).
	err := db.QueryRow(ctx, `select coalesce((select json_agg(json_build_object('id', d.id, 'queue', d.queue, 'grp', d.grp, 'slot', d.slot,
		'ev_id', d.ev_id, 'ev_time', d.ev_time, 'ev_type', d.ev_type, 'ev_data', d.ev_data, 'key', d.key, 'attempts', d.attempts,
		'last_error', d.last_error, 'reason', d.reason, 'actor', d.actor, 'db_role', d.db_role, 'dead_at', d.dead_at,
		'replayed_at', d.replayed_at, 'replay_ev_id', d.replay_ev_id) order by d.id) from partitionq.dead_letter d), '[]')::text ||
		coalesce((select json_agg(a order by a.id) from partitionq.audit a), '[]')::text`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A database set up by the previous version (schema 3, with the roles of
// that version's sql/roles.sql, under which the operator could forge an
// audit entry and the worker a dead letter) is upgraded by the owner's
// partitionq setup: the records are kept as they were, the roles lose their
// direct writes and get the record functions instead, and the current
// sql/roles.sql then gives exactly the privilege matrix.
func TestMigrationFromVersion3(t *testing.T) {
	t.Parallel()
	e := newBareEnv(t)
	for _, f := range []string{"../../partitionq/internal/store/testdata/schema_v3.sql", "testdata/roles_v3.sql"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sql := string(b)
		for _, r := range roleNames {
			sql = strings.ReplaceAll(sql, "partitionq_"+r, e.group(r))
		}
		if _, err := e.admin.Exec(e.ctx, sql); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	e.logins()
	// Records written under version 3, forged ones too (which is why it changes).
	op, wk := e.pool("operator", 1), e.pool("worker", 1)
	if _, err := op.Exec(e.ctx, `insert into partitionq.audit (db_role, actor, action, queue, grp, key, ev_id, reason, outcome)
		values ('postgres', 'root', 'skip', 'q', 'g', 'k', 1, 'forged under v3', 'skipped')`); err != nil {
		t.Fatalf("version 3: the operator's insert into the audit trail: %v", err)
	}
	if _, err := wk.Exec(e.ctx, `insert into partitionq.dead_letter (queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts, reason, actor)
		values ('q', 'g', 0, 1, now(), 'T', '{"a":1}', 'k', 2, 'max_attempts', 'worker'),
		       ('q', 'g', 1, 2, now(), 'T', 'x', 'k2', 0, 'skip: forged', 'alice')`); err != nil {
		t.Fatalf("version 3: the worker's insert into the dead letters: %v", err)
	}
	before := records(t, e.ctx, e.admin)

	// The owner's setup upgrades.
	if _, err := e.ac.Setup(e.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 2}); err != nil {
		t.Fatalf("setup on a version 3 schema: %v", err)
	}
	var version int
	if err := e.admin.QueryRow(e.ctx, `select max(version) from partitionq.schema_version`).Scan(&version); err != nil || version != partitionq.SchemaVersion() {
		t.Fatalf("schema version after setup: %d, %v", version, err)
	}
	if after := records(t, e.ctx, e.admin); after != before {
		t.Errorf("the migration changed the records:\nbefore %s\nafter  %s", before, after)
	}
	// The grants moved, before any new roles.sql runs.
	for _, r := range roleNames {
		got := privileges(t, e.ctx, e.admin, e.group(r))
		for _, obj := range []string{"table dead_letter", "table audit"} {
			if strings.ContainsAny(got[obj], "awdD") {
				t.Errorf("%s keeps %q on %s after the migration", r, got[obj], obj)
			}
		}
		for _, obj := range []string{"sequence dead_letter_id_seq", "sequence audit_id_seq"} {
			if got[obj] != "" {
				t.Errorf("%s keeps %q on %s after the migration", r, got[obj], obj)
			}
		}
		for _, f := range []string{"give_up", "set_aside", "record_replay", "record_action", "purge_dead_letters"} {
			want := matrix["function "+f][r]
			if r == "viewer" || r == "producer" {
				want = ""
			}
			if got["function "+f] != want {
				t.Errorf("%s on function %s after the migration: %q, want %q", r, f, got["function "+f], want)
			}
		}
	}
	_, err := op.Exec(e.ctx, `insert into partitionq.audit (db_role, actor, action, queue, grp, outcome) values ('postgres', 'root', 'skip', 'q', 'g', 'skipped')`)
	denied(t, "operator: insert into the audit trail after the migration", err)
	_, err = wk.Exec(e.ctx, `insert into partitionq.dead_letter (queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts, reason)
		values ('q', 'g', 0, 3, now(), 'T', 'x', 'k', 0, 'forged')`)
	denied(t, "worker: insert into the dead letters after the migration", err)

	// The current roles.sql on the upgraded database: the matrix.
	if _, err := e.admin.Exec(e.ctx, rolesSQL(t, e.prefix)); err != nil {
		t.Fatalf("sql/roles.sql after the upgrade: %v", err)
	}
	checkMatrix(t, e)
	if after := records(t, e.ctx, e.admin); after != before {
		t.Errorf("sql/roles.sql changed the records")
	}
}

// Every function of partitionq's schema has its search_path pinned, with
// pg_catalog first and pg_temp last (a role cannot put a table or function
// of its own in the way), and every one that a role may execute (the record
// functions, the fencing checks) runs with the owner's rights: SECURITY
// DEFINER. The others are helpers that only those call.
func TestFunctionsAreDefinerWithAPinnedPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rows, err := e.admin.Query(e.ctx, `select p.proname, p.prosecdef, coalesce(array_to_string(p.proconfig, ','), '')
		from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'partitionq' order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	definers := 0
	for rows.Next() {
		var name, config string
		var definer bool
		if err := rows.Scan(&name, &definer, &config); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(config, "search_path=pg_catalog") || !strings.HasSuffix(config, "pg_temp") {
			t.Errorf("function partitionq.%s: proconfig %q, want search_path pinned (pg_catalog first, pg_temp last)", name, config)
		}
		granted := len(matrix["function "+name]) > 0
		if granted && !definer {
			t.Errorf("function partitionq.%s is granted to a role but is not SECURITY DEFINER", name)
		}
		if definer {
			definers++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if definers < 7 { // give_up, set_aside, record_replay, record_action, purge_dead_letters, check_owner, record_done
		t.Fatalf("%d SECURITY DEFINER functions in partitionq's schema, want the 7 record and fencing functions at least", definers)
	}
}
