package partitionq_test

import (
	"strings"
	"testing"

	"github.com/partitionq/partitionq/partitionq"
)

// An engine named by Config.EngineSchema that the database does not have
// is reported as not installed, with how to install it, as detection does
// when it finds none (before, NewClient accepted it and the first call
// failed with "relation pgque.queue does not exist").
func TestEngineSchemaNotInstalled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := "pgque" // the engine this database does not have
	if b.db.Schema == "pgque" {
		other = "pgq"
	}
	_, err := partitionq.NewClient(b.ctx, b.pool, partitionq.Config{EngineSchema: other})
	if err == nil {
		t.Fatalf("NewClient with EngineSchema %s accepted a database without it", other)
	}
	for _, want := range []string{other, "not installed", "docs/engines.md", b.db.Schema + ", which is installed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if _, err := partitionq.NewClient(b.ctx, b.pool, partitionq.Config{EngineSchema: b.db.Schema}); err != nil {
		t.Errorf("NewClient with EngineSchema %s on %s: %v", b.db.Schema, b.db.Schema, err)
	}
	if b.db.Schema != "pgq" {
		return // dropping PgQue is not one statement; the PgQ half covers a missing engine named
	}
	if _, err := b.pool.Exec(b.ctx, `drop extension pgq cascade`); err != nil {
		t.Fatal(err)
	}
	_, err = partitionq.NewClient(b.ctx, b.pool, partitionq.Config{EngineSchema: "pgq"})
	if err == nil || !strings.Contains(err.Error(), "not installed") || !strings.Contains(err.Error(), "create extension pgq") {
		t.Errorf("NewClient with EngineSchema pgq without PgQ: %v", err)
	}
}
