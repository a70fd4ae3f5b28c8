// Package dbtest gives a package's tests of partitionq's internals one
// database for all of them (test/pgtest's Shared), with the engine of
// PARTITIONQ_ENGINE, partitionq's schema migrated, a pool on it and the
// engine's handle: making a database and installing the engine costs more
// than most tests of one package. Only tests import it.
package dbtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/test/pgtest"
)

// Shared is one database for a package's tests: its zero value is ready;
// the first test that calls Get makes it, TestMain's Close drops it.
type Shared struct {
	db   pgtest.Shared
	once sync.Once
	pool *pgxpool.Pool
	eng  *engine.Engine
	err  error
}

// Get returns a pool on the package's database and the engine's handle;
// the test is skipped, as with pgtest.New, when no server answers and
// PARTITIONQ_REQUIRE_DB is not set.
func (s *Shared) Get(t testing.TB) (*pgxpool.Pool, *engine.Engine) {
	t.Helper()
	sdb := s.db.DB(t)
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if s.pool, s.err = pgxpool.New(ctx, sdb.URL); s.err != nil {
			return
		}
		if s.err = store.Migrate(ctx, s.pool); s.err != nil {
			return
		}
		s.eng, s.err = engine.New(sdb.Schema)
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.pool, s.eng
}

// Close closes the pool and drops the database (kept when code is not 0
// and PQ_TEST_KEEP_FAILED is set); it returns the exit code for TestMain.
func (s *Shared) Close(code int) int {
	if s.pool != nil {
		s.pool.Close()
	}
	return s.db.Close(code)
}
