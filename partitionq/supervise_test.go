package partitionq_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// warnings is a slog.Handler that keeps the time of every warning whose
// message holds a given text.
type warnings struct {
	text string
	mu   sync.Mutex
	at   []time.Time
}

func (h *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnings) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *warnings) WithGroup(string) slog.Handler                { return h }
func (h *warnings) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.text) {
		h.mu.Lock()
		h.at = append(h.at, r.Time)
		h.mu.Unlock()
	}
	return nil
}

// after reports whether a warning came after t.
func (h *warnings) after(t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, at := range h.at {
		if at.After(t) {
			return true
		}
	}
	return false
}

// A worker reads the group's generations (through its client's pool) when
// a lease renewal shows the group changed. When that read fails after the
// group's last change (here: a resize has ended, and the client's pool has
// no connection to give for the read's 10 s), the worker reads again a
// second later, and runs the new generation's slots once the read works.
// Before, it waited for the next change of the group, which never came: the
// new generation's slots stayed unowned.
func TestWorkerReadsTheGenerationsAgainAfterAFailedRead(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	b := setup(t) // its client resizes and reads the status
	b.group(t, 2)
	small := pgtest.Pool(t, b.db, 2)
	logs := &warnings{text: "reading the group's generations failed"}
	c, err := partitionq.NewClient(b.ctx, small, partitionq.Config{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, b.ctx, c, partitionq.WorkerConfig{
		Handler: partitionq.HandlerFunc(func(context.Context, *partitionq.Event) error { return nil }),
	})
	owned := func(n int) func() (bool, error) {
		return func() (bool, error) {
			st, err := b.client.Status(b.ctx, "q", "g")
			if err != nil || st.Slots != n || st.Resize != nil {
				return false, err
			}
			k := 0
			for _, s := range st.SlotStatus {
				if s.Owner != nil {
					k++
				}
			}
			return k == n, nil
		}
	}
	pgtest.WaitFor(t, 30*time.Second, "both slots owned", owned(2))

	// The client's pool gives no connection: every read of the
	// generations times out. The worker's own pool (its lease, reads,
	// handoffs) works, so the resize goes through to its end.
	var held []*pgxpool.Conn
	for range 2 {
		conn, err := small.Acquire(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	released := false
	release := func() {
		if !released {
			released = true
			for _, conn := range held {
				conn.Release()
			}
		}
	}
	defer release()
	if _, err := b.client.Resize(b.ctx, partitionq.ResizeRequest{Queue: "q", Group: "g", Slots: 4, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if _, err := b.client.WaitResize(wctx, "q", "g", 20*time.Millisecond); err != nil {
		t.Fatalf("the resize did not end: %v", err)
	}
	ended := time.Now()
	// A read that began after the resize's end failed: it ended at least
	// its 10 s bound later.
	pgtest.WaitFor(t, 60*time.Second, "a read of the generations, begun after the resize ended, failed", func() (bool, error) {
		return logs.after(ended.Add(10 * time.Second)), nil
	})
	release()
	pgtest.WaitFor(t, 20*time.Second, "the new generation's 4 slots owned once the client's pool works again", owned(4))
}
