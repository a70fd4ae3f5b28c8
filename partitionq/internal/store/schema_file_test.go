package store_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/test/pgtest"
)

var update = flag.Bool("update", false,
	"write sql/schema.sql (TestSchemaFile), and the frozen schema of the newest version when it has none (TestLatestVersionIsFrozen)")

// schemaFile is sql/schema.sql, from this package's directory.
const schemaFile = "../../../sql/schema.sql"

const regenerateSchemaFile = "go test ./partitionq/internal/store -run TestSchemaFile -update"

// sql/schema.sql is the schema the migrations and the function files make,
// as the catalog of a new database has it: the test regenerates it and
// compares. And it is complete: run in an empty database, it makes the
// very same schema (fingerprint, rows).
func TestSchemaFile(t *testing.T) {
	db := pgtest.New(t)
	pool := pgtest.Pool(t, db, 2)
	ctx := context.Background()

	var fresh, body string
	var major int
	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if err := store.Migrate(ctx, tx); err != nil {
			t.Fatal(err)
		}
		fresh = fingerprint(t, ctx, tx)
		body = describeSchema(t, ctx, tx)
		major = serverMajor(t, ctx, tx)
	})
	want := schemaFileHeader(major) + body

	b, err := os.ReadFile(schemaFile)
	switch {
	case *update:
		if err := os.WriteFile(schemaFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		b = []byte(want)
	case errors.Is(err, fs.ErrNotExist):
		t.Fatalf("sql/schema.sql is missing: write it with `%s`", regenerateSchemaFile)
	case err != nil:
		t.Fatal(err)
	}
	got := string(b)
	if got != want {
		if fileMajor := generatedOn(got); fileMajor == major {
			t.Errorf("sql/schema.sql is not the schema that the migrations and the function files make: regenerate it with `%s` (and commit it)\n%s",
				regenerateSchemaFile, firstDifference(got, want))
		} else {
			// Another major version may word a definition differently:
			// what the file makes is checked below all the same.
			t.Logf("sql/schema.sql was generated on PostgreSQL %d, this server is %d: its text is not compared, only the schema it makes", fileMajor, major)
		}
	}

	pgtest.InTx(t, pool, func(tx pgx.Tx) {
		if _, err := tx.Exec(ctx, got); err != nil {
			t.Fatalf("sql/schema.sql does not run in an empty database: %v (regenerate it with `%s`)", err, regenerateSchemaFile)
		}
		if fp := fingerprint(t, ctx, tx); fp != fresh {
			t.Errorf("sql/schema.sql makes another schema than the migrations (regenerate it with `%s`; if that does not help, the generator in schema_file_test.go misses what differs):\n%s",
				regenerateSchemaFile, diffLines(fresh, fp))
		}
		if again := describeSchema(t, ctx, tx); again != body {
			t.Errorf("sql/schema.sql, run, describes itself otherwise:\n%s", firstDifference(again, body))
		}
	})
}

// schemaFileHeader opens sql/schema.sql: what it is, and how to make it again.
func schemaFileHeader(major int) string {
	return fmt.Sprintf(`-- partitionq's schema (the partitionq schema in PostgreSQL), as a new
-- database gets it: its tables, the rows it starts with, its functions
-- with their rights, its triggers.
--
-- Generated from the catalog of a database migrated by partitionq, on
-- PostgreSQL %d: do not edit. Tables change in numbered migrations
-- (partitionq/internal/store/migration/), functions in their own files
-- (partitionq/internal/store/function/, one per function); then run
--   %s
-- (it needs a database: scripts/devdb.sh). The test fails while this file
-- is not what they make. It runs as it is in an empty database, making the
-- same schema (partitionq itself installs and upgrades with the migrations).

`, major, regenerateSchemaFile)
}

var generatedOnRE = regexp.MustCompile(`(?m)^-- PostgreSQL ([0-9]+): do not edit\.`)

// generatedOn reads the major version of PostgreSQL that generated a
// schema file (0: none said).
func generatedOn(file string) int {
	m := generatedOnRE.FindStringSubmatch(file)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func serverMajor(t *testing.T, ctx context.Context, q pgx.Tx) int {
	t.Helper()
	var n int
	if err := q.QueryRow(ctx, `select current_setting('server_version_num')::int / 10000`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// firstDifference shows where two texts part: the first line that differs
// and a few around it.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	i := 0
	for i < len(g) && i < len(w) && g[i] == w[i] {
		i++
	}
	show := func(lines []string) string {
		end := min(i+4, len(lines))
		if i >= end {
			return "(end of text)"
		}
		return strings.Join(lines[i:end], "\n")
	}
	return fmt.Sprintf("from line %d, the file has:\n%s\nand the schema:\n%s", i+1, show(g), show(w))
}

// describeSchema writes partitionq's schema as the catalog of q has it,
// runnable and in a reading order: every table (in the order the
// migrations create them, each with the comment above its create table
// and the migrations that shape it), its indexes, the rows of the tables
// that have some, every function (in name order, with the comment of its
// file) with its rights, every trigger. Where the schema holds something
// it does not know how to write, the test fails: a schema file that
// silently leaves something out would be worse than none.
func describeSchema(t *testing.T, ctx context.Context, q pgx.Tx) string {
	t.Helper()
	refuseUnknown(t, ctx, q)
	var b strings.Builder
	b.WriteString("CREATE SCHEMA partitionq;\n")

	tables := tableOrder(t, ctx, q)
	section(&b, "tables", "in the order the migrations create them")
	for _, tb := range tables {
		writeTable(t, ctx, q, &b, tb)
	}

	section(&b, "rows", "what a new schema holds")
	for _, tb := range tables {
		writeRows(t, ctx, q, &b, tb.name)
	}

	section(&b, "functions", "in name order, each from its file, with who may call it")
	writeFunctions(t, ctx, q, &b)

	section(&b, "triggers", "made by the migrations; here after the functions they call")
	rows, err := q.Query(ctx, `
		select pg_get_triggerdef(g.oid) from pg_trigger g join pg_class r on r.oid = g.tgrelid
		 where r.relnamespace = 'partitionq'::regnamespace and not g.tgisinternal order by r.relname, g.tgname`)
	if err != nil {
		t.Fatal(err)
	}
	triggers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range triggers {
		b.WriteString("\n" + tr + ";\n")
	}
	return b.String()
}

func section(b *strings.Builder, name, what string) {
	line := "\n-- " + strings.Repeat("=", 70-len(name)) + " " + name + "\n"
	if what != "" {
		line += "-- " + what + "\n"
	}
	b.WriteString(line)
}

// refuseUnknown fails the test when the schema holds what describeSchema
// does not write.
func refuseUnknown(t *testing.T, ctx context.Context, q pgx.Tx) {
	t.Helper()
	rows, err := q.Query(ctx, `
		select 'relation ' || relname || ' of kind ' || relkind::text from pg_class
		 where relnamespace = 'partitionq'::regnamespace and relkind not in ('r', 'i', 'S')
		union all
		select 'rights on ' || relname from pg_class where relnamespace = 'partitionq'::regnamespace and relacl is not null
		union all
		select 'type ' || typname from pg_type where typnamespace = 'partitionq'::regnamespace and typrelid = 0 and typelem = 0
		union all
		select 'comment on ' || pg_describe_object(d.classoid, d.objoid, d.objsubid) from pg_description d
		 where (d.classoid = 'pg_class'::regclass and d.objoid in (select oid from pg_class where relnamespace = 'partitionq'::regnamespace))
		    or (d.classoid = 'pg_proc'::regclass and d.objoid in (select oid from pg_proc where pronamespace = 'partitionq'::regnamespace))
		union all
		select 'identity, generated column or column rights ' || c.relname || '.' || a.attname
		  from pg_attribute a join pg_class c on c.oid = a.attrelid
		 where c.relnamespace = 'partitionq'::regnamespace and a.attnum > 0
		   and (a.attidentity <> ''::"char" or a.attgenerated <> ''::"char" or a.attacl is not null)
		union all
		select 'policy ' || p.polname from pg_policy p join pg_class c on c.oid = p.polrelid where c.relnamespace = 'partitionq'::regnamespace
		union all
		select 'rule ' || r.rulename from pg_rewrite r join pg_class c on c.oid = r.ev_class where c.relnamespace = 'partitionq'::regnamespace
		union all
		select 'sequence ' || s.relname || ', which is no column''s serial' from pg_class s
		 where s.relnamespace = 'partitionq'::regnamespace and s.relkind = 'S'
		   and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass and d.objid = s.oid and d.deptype = 'a')`)
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(unknown) > 0 {
		t.Fatalf("the schema holds what sql/schema.sql's generator (describeSchema, schema_file_test.go) does not write: %s; teach it", strings.Join(unknown, "; "))
	}
}

type table struct {
	name    string
	oid     uint32
	comment string   // the comment above its create table
	files   []string // the migrations that create and change it
}

var (
	createTableRE = regexp.MustCompile(`(?m)^create table (?:if not exists )?partitionq\.([a-z0-9_]+)`)
	sqlCommentRE  = regexp.MustCompile(`--[^\n]*`)
)

// tableOrder lists the tables in the order the migrations create them,
// and fails on one that no migration creates.
func tableOrder(t *testing.T, ctx context.Context, q pgx.Tx) []table {
	t.Helper()
	rows, err := q.Query(ctx, `select relname, oid from pg_class where relnamespace = 'partitionq'::regnamespace and relkind = 'r'`)
	if err != nil {
		t.Fatal(err)
	}
	oids := map[string]uint32{}
	for rows.Next() {
		var name string
		var oid uint32
		if err := rows.Scan(&name, &oid); err != nil {
			t.Fatal(err)
		}
		oids[name] = oid
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var out []table
	seen := map[string]bool{}
	for _, m := range store.Migrations() {
		for _, loc := range createTableRE.FindAllStringSubmatchIndex(m.SQL, -1) {
			name := m.SQL[loc[2]:loc[3]]
			if seen[name] || oids[name] == 0 {
				continue // created again, or dropped since
			}
			seen[name] = true
			out = append(out, table{name: name, oid: oids[name], comment: commentAbove(m.SQL, loc[0])})
		}
	}
	for name := range oids {
		if !seen[name] {
			t.Fatalf("table partitionq.%s is made by no `create table partitionq.%s` of a migration: sql/schema.sql's generator cannot place it", name, name)
		}
	}
	for i := range out {
		changes := regexp.MustCompile(`(?m)^(?:create table (?:if not exists )?|alter table |create (?:unique )?index (?:if not exists )?[a-z0-9_]+ on |create trigger [^;]* on )partitionq\.` + out[i].name + `\b`)
		for _, m := range store.Migrations() {
			if changes.MatchString(sqlCommentRE.ReplaceAllString(m.SQL, "")) {
				out[i].files = append(out[i].files, m.Name)
			}
		}
	}
	return out
}

// commentAbove returns the comment lines right above offset at in sql,
// without a decoration line of dashes.
func commentAbove(sql string, at int) string {
	lines := strings.Split(sql[:at], "\n")
	lines = lines[:len(lines)-1] // the start of the create table line
	i := len(lines)
	for i > 0 && strings.HasPrefix(lines[i-1], "--") && !strings.HasPrefix(lines[i-1], "-- Version ") {
		i--
	}
	var out []string
	for _, l := range lines[i:] {
		if !regexp.MustCompile(`^-- -+ `).MatchString(l) {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, "\n") + "\n"
}

type column struct {
	name, typ, def, collation string
	notNull                   bool
	serial                    bool
}

func writeTable(t *testing.T, ctx context.Context, q pgx.Tx, b *strings.Builder, tb table) {
	t.Helper()
	rows, err := q.Query(ctx, `
		select a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
		       case when a.attcollation <> t.typcollation then a.attcollation::regcollation::text else '' end,
		       -- a serial: its default takes the next value of a sequence the
		       -- column owns, named as serial names it, with serial's settings
		       coalesce((select pg_get_expr(d.adbin, d.adrelid) = format('nextval(%L::regclass)', s.oid::regclass::text)
		                        and s.relname = c.relname || '_' || a.attname || '_seq'
		                        and q.seqstart = 1 and q.seqincrement = 1 and q.seqmin = 1 and q.seqcache = 1 and not q.seqcycle
		                        and q.seqmax = case format_type(a.atttypid, null) when 'bigint' then 9223372036854775807 else 2147483647 end
		                   from pg_depend p join pg_class s on s.oid = p.objid join pg_sequence q on q.seqrelid = s.oid
		                  where p.classid = 'pg_class'::regclass and p.refobjid = c.oid and p.refobjsubid = a.attnum and p.deptype = 'a'), false)
		  from pg_class c join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
		  join pg_type t on t.oid = a.atttypid
		  left join pg_attrdef d on d.adrelid = c.oid and d.adnum = a.attnum
		 where c.oid = $1
		 order by a.attnum`, tb.oid)
	if err != nil {
		t.Fatal(err)
	}
	var cols []column
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.name, &c.typ, &c.notNull, &c.def, &c.collation, &c.serial); err != nil {
			t.Fatal(err)
		}
		if c.serial {
			c.typ = map[string]string{"bigint": "bigserial", "integer": "serial", "smallint": "smallserial"}[c.typ]
			c.def, c.notNull = "", false // serial's
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = q.Query(ctx, `
		select 'CONSTRAINT ' || quote_ident(conname) || ' ' || pg_get_constraintdef(oid) from pg_constraint
		 where conrelid = $1 and contype <> 'n' -- not null, PostgreSQL 18's: said on its column
		 order by array_position(array['p', 'u', 'c', 'f', 'x', 't']::"char"[], contype), conname`, tb.oid)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var options string
	if err := q.QueryRow(ctx, `select coalesce(array_to_string(reloptions, ', '), '') from pg_class where oid = $1`, tb.oid).Scan(&options); err != nil {
		t.Fatal(err)
	}
	rows, err = q.Query(ctx, `
		select pg_get_indexdef(i.indexrelid) from pg_index i
		 where i.indrelid = $1 and not exists (select 1 from pg_constraint k where k.conindid = i.indexrelid and k.conrelid = i.indrelid)
		 order by i.indexrelid::regclass::text`, tb.oid)
	if err != nil {
		t.Fatal(err)
	}
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}

	fmt.Fprintf(b, "\n-- migration/%s\n", strings.Join(tb.files, ", "))
	b.WriteString(tb.comment)
	fmt.Fprintf(b, "CREATE TABLE partitionq.%s (\n", tb.name)
	nameW, typW := 0, 0
	for _, c := range cols {
		nameW, typW = max(nameW, len(c.name)), max(typW, len(c.typ))
	}
	var lines []string
	for _, c := range cols {
		l := fmt.Sprintf("%-*s %-*s", nameW, c.name, typW, c.typ)
		if c.collation != "" {
			l += " COLLATE " + c.collation
		}
		if c.def != "" {
			l += " DEFAULT " + c.def
		}
		if c.notNull {
			l += " NOT NULL"
		}
		lines = append(lines, "    "+strings.TrimRight(l, " "))
	}
	for _, c := range cons {
		lines = append(lines, "    "+c)
	}
	b.WriteString(strings.Join(lines, ",\n") + "\n)")
	if options != "" {
		b.WriteString(" WITH (" + options + ")")
	}
	b.WriteString(";\n")
	for _, ix := range indexes {
		b.WriteString(ix + ";\n")
	}
}

// writeRows writes the rows a table holds, if any, in a stable order.
func writeRows(t *testing.T, ctx context.Context, q pgx.Tx, b *strings.Builder, name string) {
	t.Helper()
	rows, err := q.Query(ctx, `select quote_ident(attname) from pg_attribute where attrelid = ('partitionq.' || quote_ident($1))::regclass
		and attnum > 0 and not attisdropped order by attnum`, name)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]string, len(cols))
	for i, c := range cols {
		vals[i] = "quote_nullable(" + c + ")"
	}
	rows, err = q.Query(ctx, fmt.Sprintf(`select '(' || concat_ws(', ', %s) || ')' from partitionq.%s order by 1`,
		strings.Join(vals, ", "), pgx.Identifier{name}.Sanitize()))
	if err != nil {
		t.Fatal(err)
	}
	tuples, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(tuples) == 0 {
		return
	}
	fmt.Fprintf(b, "\nINSERT INTO partitionq.%s (%s) VALUES\n    %s;\n", name, strings.Join(cols, ", "), strings.Join(tuples, ",\n    "))
}

// writeFunctions writes every function: the comment of its file, its
// definition as PostgreSQL gives it back, and who may call it besides the
// schema's owner.
func writeFunctions(t *testing.T, ctx context.Context, q pgx.Tx, b *strings.Builder) {
	t.Helper()
	files := map[string]store.Function{}
	for _, f := range store.Functions() {
		files[f.Name] = f
	}
	rows, err := q.Query(ctx, `
		select p.proname, p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.proacl is null,
		       coalesce((select array_agg(case when a.grantee = 0 then 'PUBLIC' when a.grantee = p.proowner then '' else quote_ident(pg_get_userbyid(a.grantee)) end
		                                  || ':' || a.privilege_type || case when a.is_grantable then '*' else '' end order by 1)
		                   from aclexplode(p.proacl) a), '{}')
		  from pg_proc p where p.pronamespace = 'partitionq'::regnamespace
		 order by p.proname, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for rows.Next() {
		var name, sig, def string
		var everyone bool
		var acl []string
		if err := rows.Scan(&name, &sig, &def, &everyone, &acl); err != nil {
			t.Fatal(err)
		}
		f, ok := files[name]
		if !ok {
			t.Fatalf("function %s has no file function/%s.sql: every function of the schema is defined in its own file", sig, name)
		}
		defined[name] = true
		fmt.Fprintf(b, "\n-- function/%s.sql\n", name)
		b.WriteString(fileComment(f.SQL))
		b.WriteString(strings.TrimRight(def, "\n") + ";\n")
		if everyone {
			continue // never revoked: every role may call it
		}
		var grantees []string
		for _, item := range acl {
			switch {
			case item == ":EXECUTE": // the owner's
			case strings.HasSuffix(item, ":EXECUTE") && !strings.HasPrefix(item, "PUBLIC:"):
				grantees = append(grantees, strings.TrimSuffix(item, ":EXECUTE"))
			default:
				t.Fatalf("function %s has rights that sql/schema.sql's generator does not write (%v): teach writeFunctions", sig, acl)
			}
		}
		if !slices.Contains(acl, ":EXECUTE") {
			t.Fatalf("function %s: its owner may not call it (%v), which sql/schema.sql's generator does not write: teach writeFunctions", sig, acl)
		}
		fmt.Fprintf(b, "REVOKE ALL ON FUNCTION %s FROM PUBLIC;\n", sig)
		for _, g := range grantees {
			fmt.Fprintf(b, "GRANT EXECUTE ON FUNCTION %s TO %s;\n", sig, g)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if !defined[name] {
			t.Fatalf("function/%s.sql defines no function partitionq.%s in the schema", name, name)
		}
	}
}

// fileComment is the comment that opens a function's file.
func fileComment(sql string) string {
	var out []string
	for _, l := range strings.Split(sql, "\n") {
		if !strings.HasPrefix(l, "--") {
			break
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, "\n") + "\n"
}
