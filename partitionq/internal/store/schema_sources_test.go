package store_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/partitionq/partitionq/partitionq/internal/store"
)

var (
	createFunctionRE = regexp.MustCompile(`(?im)^[ \t]*create\s+(or\s+replace\s+)?function\s+([a-z0-9_."]+)\s*\(`)
	dropFunctionRE   = regexp.MustCompile(`(?im)^[ \t]*drop\s+function\b`)
	lineCommentRE    = regexp.MustCompile(`--[^\n]*`)
)

// Each function file defines its function, and only it, with `create or
// replace` (a drop would lose the rights granted on it), opens with a
// comment saying what the function does, and revokes PUBLIC's right to
// call it (the roles that may are granted it by sql/roles.sql).
func TestFunctionFiles(t *testing.T) {
	fns := store.Functions()
	if len(fns) == 0 {
		t.Fatal("no function files")
	}
	for _, f := range fns {
		file := "function/" + f.Name + ".sql"
		if !strings.HasPrefix(f.SQL, "-- ") {
			t.Errorf("%s does not open with a comment saying what the function does", file)
		}
		code := lineCommentRE.ReplaceAllString(f.SQL, "")
		defs := createFunctionRE.FindAllStringSubmatch(code, -1)
		if len(defs) != 1 || defs[0][1] == "" || defs[0][2] != "partitionq."+f.Name {
			t.Errorf("%s must define partitionq.%s, once, with `create or replace function partitionq.%s(`; it has %q", file, f.Name, f.Name, defs)
		}
		if dropFunctionRE.MatchString(code) {
			t.Errorf("%s drops a function: a signature that changes is dropped by the migration of that version, and a drop here would lose the rights granted on the function", file)
		}
		if !regexp.MustCompile(`(?i)\brevoke all on function partitionq\.` + f.Name + `\([^)]*\) from public;`).MatchString(code) {
			t.Errorf("%s does not revoke PUBLIC's right to call partitionq.%s (`revoke all on function partitionq.%s(...) from public;`)", file, f.Name, f.Name)
		}
	}
}

// A migration defines no function: each is in its own file, applied after
// the migrations (or before one that says it needs it).
func TestMigrationsDefineNoFunction(t *testing.T) {
	for _, m := range store.Migrations() {
		if defs := createFunctionRE.FindAllString(lineCommentRE.ReplaceAllString(m.SQL, ""), -1); len(defs) > 0 {
			t.Errorf("%s defines functions (%q): put each in function/NAME.sql; a migration that needs one while it runs says `-- Needs function/NAME.sql`", m.Name, defs)
		}
	}
}
