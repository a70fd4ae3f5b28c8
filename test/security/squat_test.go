package security_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// A role with CONNECT alone took a slot from its
// workers with pg_advisory_lock(28753, <sub_id>) and stopped every ticker
// with pg_advisory_lock(28753, -2). Slot ownership and the ticker's turns
// are rows of partitionq's own tables now, which such a role cannot read or
// lock: holding those advisory locks (and every other key of the class it
// can guess) changes nothing, the worker owns both slots and handles every
// event, and the owner's ticker ticks.
func TestConnectAloneCannotSquat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nobody := e.prefix + "_nobody"
	if _, err := e.admin.Exec(e.ctx, "create role "+nobody+" login"); err != nil {
		t.Fatal(err)
	}
	e.extraRoles = append(e.extraRoles, nobody)
	cfg, err := pgx.ParseConfig(e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = nobody
	sq, err := pgx.ConnectConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close(e.ctx) })
	// Every key the old design used (the slots' sub_ids, the ticker's -2)
	// and the ones around them, held for the whole test.
	var locked int
	if err := sq.QueryRow(e.ctx, e.db.SQL(`select count(pg_advisory_lock(28753, k)) from (
		select sub_id as k from pgq.subscription union select generate_series(-10, 10)) ks`)).Scan(&locked); err != nil {
		t.Fatalf("the squatter's advisory locks: %v", err)
	}
	for _, sql := range []string{
		`select * from partitionq.ticker_turn for update`,
		`update partitionq.slot set worker_id = null`,
		`insert into partitionq.worker (identity, lease_until) values ('squatter', 'infinity')`,
	} {
		_, err := sq.Exec(e.ctx, sql)
		denied(t, "CONNECT alone: "+sql, err)
	}

	h := &handler{}
	wc := e.client("worker", partitionq.WorkerConns(), nil)
	w, err := wc.NewWorker(e.ctx, partitionq.WorkerConfig{
		Queue: "q", Group: "g", Handler: h, Identity: "the-real-worker",
		Limits:    partitionq.LimitsConfig{PollInterval: 10 * time.Millisecond},
		Ownership: partitionq.OwnershipConfig{StandbyPoll: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(e.ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
	var ms []partitionq.Message
	for i := range 20 {
		ms = append(ms, partitionq.Message{Key: fmt.Sprintf("k%d", i), Payload: []byte("ok")})
	}
	if _, err := e.client("producer", 2, nil).SendBatch(e.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 30*time.Second, "every event handled while the squatter holds its locks", func() (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.calls >= len(ms), nil
	})
	st, err := e.ac.Status(e.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.SlotStatus {
		if s.Owner == nil || s.Owner.Name != "the-real-worker" {
			t.Errorf("slot %d: owner %+v, want the worker", s.Slot, s.Owner)
		}
	}
}
