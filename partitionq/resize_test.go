package partitionq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// runLog is a handler that records the start and end of every handler run
// and every outcome, for ordercheck: what a key's handlers experienced.
// Events whose seq is a multiple of failEvery fail their first failTimes
// attempts; the key "stuck" fails until an operator acts. Each run takes
// about hold, so that batches are in flight when the resize comes.
type runLog struct {
	mu        sync.Mutex
	runs      []ordercheck.Run
	log       []ordercheck.Handling
	tries     map[string]int
	failEvery int
	failTimes int
	hold      time.Duration
	slotsSeen map[int]bool // the N of the generations events were handled in
}

func newRunLog(failEvery, failTimes int, hold time.Duration) *runLog {
	return &runLog{tries: map[string]int{}, failEvery: failEvery, failTimes: failTimes, hold: hold, slotsSeen: map[int]bool{}}
}

func seqOf(ev *partitionq.Event) int {
	var p struct{ Seq int }
	_ = json.Unmarshal(ev.Payload, &p)
	return p.Seq
}

func (l *runLog) Handle(ctx context.Context, ev *partitionq.Event) error {
	seq := seqOf(ev)
	l.mu.Lock()
	i := len(l.runs)
	l.runs = append(l.runs, ordercheck.Run{Key: ev.Key, Seq: seq, Worker: fmt.Sprint(ev.Slots, "/", ev.Slot), Start: time.Now()})
	id := fmt.Sprintf("%s/%d", ev.Key, seq)
	l.tries[id]++
	try := l.tries[id]
	l.slotsSeen[ev.Slots] = true
	l.mu.Unlock()
	var err error
	switch {
	case ev.Key == "stuck" && seq == 0:
		err = errors.New("the stuck tenant's storage is gone")
	case l.failEvery > 0 && seq%l.failEvery == l.failEvery-1 && try <= l.failTimes:
		err = fmt.Errorf("transient failure %d of %s", try, id)
	}
	if l.hold > 0 {
		select {
		case <-time.After(l.hold):
		case <-ctx.Done():
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[i].End = time.Now()
	l.log = append(l.log, ordercheck.Handling{Key: ev.Key, Seq: seq, OK: err == nil})
	return err
}

func (l *runLog) report(sent map[string]int, dead map[string][]int) ordercheck.Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ordercheck.Check(sent, l.log, dead).WithRuns(l.runs)
}

// settled is the report once the workers have caught up: when nothing is
// lost, or when nothing more was handled for 30 s (a stall, whatever the
// machine's load).
func (l *runLog) settled(sent map[string]int, dead map[string][]int) ordercheck.Report {
	r := l.report(sent, dead)
	lost, moved := r.Lost, time.Now()
	for r.Lost > 0 && time.Since(moved) < 30*time.Second {
		time.Sleep(20 * time.Millisecond)
		if r = l.report(sent, dead); r.Lost < lost {
			lost, moved = r.Lost, time.Now()
		}
	}
	return r
}

// producer sends keyed events {"seq": n} for keys, one small batch at a time,
// until stopped; sent counts each key's events.
type producer struct {
	mu    sync.Mutex
	sent  map[string]int
	stop  chan struct{}
	done  chan struct{}
	count atomic.Int64
}

func startProducer(t *testing.T, b *bundle, keys []string, every time.Duration) *producer {
	p := &producer{sent: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			var ms []partitionq.Message
			p.mu.Lock()
			for _, k := range keys {
				ms = append(ms, partitionq.Message{Key: k, Type: "FileCreated", Payload: []byte(fmt.Sprintf(`{"seq":%d}`, p.sent[k]))})
				p.sent[k]++
			}
			p.mu.Unlock()
			if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
				t.Errorf("send: %v", err)
				return
			}
			p.count.Add(int64(len(ms)))
		}
	}()
	return p
}

func (p *producer) end() map[string]int {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, n := range p.sent {
		out[k] = n
	}
	return out
}

// TestResizeMatrix resizes a group online, growing and shrinking, while a
// producer sends, two workers run (following the resize), some events fail
// (so keys are blocked and draining at the cutover) and one key stays
// blocked through it: judged by every handler run, nothing is lost, no key
// is handled out of order or twice at once, and the stuck key crosses the
// cutover blocked on the same head, with its attempts and error, and is
// resolvable afterwards.
func TestResizeMatrix(t *testing.T) {
	for _, c := range []struct{ from, to int }{{4, 8}, {4, 6}, {8, 3}, {1, 16}} {
		t.Run(fmt.Sprintf("%d to %d", c.from, c.to), func(t *testing.T) {
			t.Parallel()
			testResize(t, c.from, c.to)
		})
	}
}

func testResize(t *testing.T, from, to int) {
	b := setup(t)
	b.group(t, from)
	h := newRunLog(7, 2, 2*time.Millisecond)
	for i := 0; i < 2; i++ {
		b.worker(t, partitionq.WorkerConfig{
			Handler: h, Identity: fmt.Sprintf("w%d", i),
			Retry:  partitionq.RetryConfig{BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
			Limits: partitionq.LimitsConfig{Concurrency: 4},
		})
	}
	// The stuck key blocks before the resize, with waiting events behind it.
	for seq := range 3 {
		if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "stuck", Type: "T", Payload: []byte(fmt.Sprintf(`{"seq":%d}`, seq))}); err != nil {
			t.Fatal(err)
		}
	}
	var before partitionq.BlockedKey
	pgtest.WaitFor(t, 30*time.Second, "the stuck key blocked, tried twice, its two events waiting", func() (bool, error) {
		bk, err := b.client.BlockedKey(b.ctx, "q", "g", "stuck")
		if errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		before = bk
		return err == nil && bk.State == partitionq.KeyBlocked && bk.Head.Attempts >= 2 && bk.Waiting == 2, err
	})

	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%02d", i)
	}
	p := startProducer(t, b, keys, 60*time.Millisecond)
	pgtest.WaitFor(t, 30*time.Second, "events flowing", func() (bool, error) { return p.count.Load() >= 500, nil })

	began := time.Now()
	res, err := b.client.Resize(b.ctx, partitionq.ResizeRequest{Queue: "q", Group: "g", Slots: to, Reason: "test", Actor: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	if res.From != from || res.To != to || res.Generation != 2 {
		t.Fatalf("resize result %+v", res)
	}
	// A second resize while this one is in flight is refused.
	if _, err := b.client.Resize(b.ctx, partitionq.ResizeRequest{Queue: "q", Group: "g", Slots: to + 1}); !errors.Is(err, partitionq.ErrResizing) {
		t.Errorf("a second resize in flight: %v, want ErrResizing", err)
	}
	wctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	g, err := b.client.WaitResize(wctx, "q", "g", 20*time.Millisecond)
	if err != nil {
		st, _ := b.client.Status(b.ctx, "q", "g")
		t.Fatalf("%v; status: %+v", err, st.Resize)
	}
	t.Logf("%d to %d: resize complete %s after it began", from, to, time.Since(began).Round(time.Millisecond))
	if g.Slots != to || g.Generation != 2 || len(g.Consumers) != to {
		t.Fatalf("after the resize: %d slots, generation %d, consumers %v", g.Slots, g.Generation, g.Consumers)
	}
	pgtest.WaitFor(t, 30*time.Second, "events handled in the new generation", func() (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.slotsSeen[to], nil
	})
	sent := p.end()

	// The stuck key: still blocked on the same head, attempts and error kept,
	// its waiting events behind it, in its slot of the new generation.
	after, err := b.client.BlockedKey(b.ctx, "q", "g", "stuck")
	if err != nil {
		t.Fatal(err)
	}
	wantSlot, _ := b.client.SlotOf(b.ctx, "stuck", to)
	if after.Head.ID != before.Head.ID || after.Head.Attempts < before.Head.Attempts || after.Head.LastError != before.Head.LastError ||
		after.Waiting != 2 || after.State != partitionq.KeyBlocked || after.Slot != wantSlot {
		t.Errorf("the stuck key across the cutover: before %+v, after %+v (slot %d of %d wanted)", before, after, wantSlot, to)
	}
	if _, err := b.client.Act(b.ctx, partitionq.ActionRequest{Action: partitionq.AuditSkip, Queue: "q", Group: "g", Key: "stuck", HeadID: after.Head.ID, Reason: "gone", Actor: "tester"}); err != nil {
		t.Fatalf("skip the stuck key after the resize: %v", err)
	}
	sent["stuck"] = 3
	dead := map[string][]int{"stuck": {0}}
	r := h.settled(sent, dead)
	t.Logf("%d to %d: %s", from, to, r)
	if !r.OK() {
		t.Errorf("%s; examples: %s", r, strings.Join(r.Examples, "; "))
		dumpEngine(t, b)
	}
	if r.Dead != 1 {
		t.Errorf("%d dead letters, want the stuck key's head", r.Dead)
	}
	// The old generation is gone from the engine; the audit trail says who
	// resized, from what to what.
	st, err := b.client.Status(b.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	if st.Resize != nil || len(st.SlotStatus) != to {
		t.Errorf("status after the resize: resize %+v, %d slots", st.Resize, len(st.SlotStatus))
	}
	audit, err := b.client.Audit(b.ctx, "q", "g", 20)
	if err != nil {
		t.Fatal(err)
	}
	var started, completed bool
	for _, a := range audit {
		started = started || (a.Action == "resize" && a.Actor == "tester" && a.Outcome == partitionq.OutcomeResizeStarted && strings.HasPrefix(a.Detail, fmt.Sprintf("%d to %d", from, to)))
		completed = completed || (a.Action == "resize" && a.Outcome == partitionq.OutcomeResizeCompleted)
	}
	if !started || !completed {
		t.Errorf("audit trail misses the resize's start or end: %+v", audit)
	}
}

// A group resized again and again, and back to an N it had (4 to 8, 8 to
// 4, 4 to 8, 8 to 3), while a producer sends, some events fail and a
// worker is replaced before each resize (its slots start afresh, as after
// a crash): every resize completes, and nothing is lost, out of order or
// run twice at once. A generation keeps its parent's N after its resize;
// the second and later resizes once found the previous resize's
// generation instead of their own and never completed.
func TestResizeAgainAndBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	h := newRunLog(7, 2, 2*time.Millisecond)
	start := func(i int) *partitionq.Worker {
		return b.worker(t, partitionq.WorkerConfig{
			Handler: h, Identity: fmt.Sprintf("w%d", i),
			Retry:  partitionq.RetryConfig{BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
			Limits: partitionq.LimitsConfig{Concurrency: 4},
		})
	}
	workers := []*partitionq.Worker{start(0), start(1)}
	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%02d", i)
	}
	p := startProducer(t, b, keys, 75*time.Millisecond)
	pgtest.WaitFor(t, 30*time.Second, "events flowing", func() (bool, error) { return p.count.Load() >= 200, nil })
	for i, to := range []int{8, 4, 8, 3} {
		if i > 0 { // a worker replaced: its successor's slots start afresh
			if err := workers[0].Stop(b.ctx); err != nil {
				t.Fatal(err)
			}
			workers = append(workers[1:], start(i+1))
		}
		if _, err := b.client.Resize(b.ctx, partitionq.ResizeRequest{Queue: "q", Group: "g", Slots: to, Reason: "again", Actor: "tester"}); err != nil {
			t.Fatalf("resize %d, to %d slots: %v", i+1, to, err)
		}
		wctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
		g, err := b.client.WaitResize(wctx, "q", "g", 20*time.Millisecond)
		cancel()
		if err != nil {
			dumpEngine(t, b)
			t.Fatalf("resize %d, to %d slots: %v", i+1, to, err)
		}
		if g.Slots != to || g.Generation != i+2 {
			t.Fatalf("after resize %d: %d slots, generation %d; want %d, %d", i+1, g.Slots, g.Generation, to, i+2)
		}
		before := p.count.Load()
		pgtest.WaitFor(t, 30*time.Second, "events flowing after the resize", func() (bool, error) { return p.count.Load() >= before+100, nil })
	}
	sent := p.end()
	r := h.settled(sent, nil)
	t.Logf("4 to 8 to 4 to 8 to 3: %s", r)
	if !r.OK() {
		t.Errorf("%s; examples: %s", r, strings.Join(r.Examples, "; "))
		dumpEngine(t, b)
	}
}

// dumpEngine logs the engine's view of queue q (its consumers' positions and
// batches, the newest tick, the retry queue by owner) and partitionq's
// generations and ownership rows: what a failed resize test needs to say
// where its events went.
func dumpEngine(t *testing.T, b *bundle) {
	t.Helper()
	for _, q := range []string{
		`select c.co_name, s.sub_id, s.sub_last_tick, s.sub_batch, s.sub_next_tick from pgq.subscription s join pgq.consumer c on c.co_id = s.sub_consumer order by 1`,
		`select max(tick_id), max(tick_event_seq) from pgq.tick`,
		`select ev_owner, count(*), min(ev_id), max(ev_id), min(ev_retry_after) from pgq.retry_queue group by 1 order by 1`,
		`select slots, number, parent_slots, resize_txid, cutover_tick from partitionq.generation order by number`,
		`select generation, n, slot, worker_id, epoch from partitionq.slot order by generation, slot`,
		`select ev_extra1, min(ev_id), max(ev_id), count(*) from pgq.event_template group by 1 order by 1`,
	} {
		rows, err := b.pool.Query(b.ctx, b.db.SQL(q))
		if err != nil {
			t.Logf("%s: %v", q, err)
			continue
		}
		var out []string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Logf("%s: %v", q, err)
				break
			}
			out = append(out, fmt.Sprint(vals...))
		}
		rows.Close()
		t.Logf("%s:\n\t%s", q, strings.Join(out, "\n\t"))
	}
}

// A handoff that fails (here its lock timeout: a session holds the engine's
// retry queue, as a long maintenance or an operator would) is tried again
// and the resize ends: the old slot, left standing at the cutover while
// ticks go on, is never moved past it. (It was: thought level with the
// newest tick, its consumer was moved there, and a slot past the cutover
// never hands off.)
func TestResizeAfterAFailedHandoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	h := newRunLog(0, 0, 0)
	b.worker(t, partitionq.WorkerConfig{Handler: h, Identity: "w", Limits: partitionq.LimitsConfig{Concurrency: 4}})
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%02d", i)
	}
	p := startProducer(t, b, keys, 20*time.Millisecond)
	pgtest.WaitFor(t, 30*time.Second, "events flowing", func() (bool, error) { return p.count.Load() >= 100, nil })

	lock, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(b.ctx) // committed below
	if _, err := lock.Exec(b.ctx, fmt.Sprintf("lock table %s.retry_queue in share update exclusive mode", b.client.EngineSchema())); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Resize(b.ctx, partitionq.ResizeRequest{Queue: "q", Group: "g", Slots: 4, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	// The old slots' handoffs wait for the lock, then give up (after the
	// handoff's lock timeout) while the ticks go on past the cutover. A
	// wait is a session's statement (pid, start); the two old slots' first
	// waits need not overlap (one may hold the group's row while the other
	// waits for it), so the waits are gathered over time: two of them seen,
	// then none of those still waiting, the lock still held.
	waits := func() (map[string]bool, error) {
		rows, err := b.pool.Query(b.ctx, `select pid || '@' || query_start from pg_stat_activity
			where datname = current_database() and wait_event_type = 'Lock' and query like '%resize_handoff%'`)
		if err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for rows.Next() {
			var w string
			if err := rows.Scan(&w); err != nil {
				return nil, err
			}
			out[w] = true
		}
		return out, rows.Err()
	}
	seen := map[string]bool{}
	pgtest.WaitFor(t, 60*time.Second, "two handoffs waiting for the lock", func() (bool, error) {
		now, err := waits()
		for w := range now {
			seen[w] = true
		}
		return len(seen) >= 2, err
	})
	pgtest.WaitFor(t, 30*time.Second, "the handoffs gave up waiting for the lock", func() (bool, error) {
		now, err := waits()
		for w := range seen {
			if now[w] {
				return false, err
			}
		}
		return true, err
	})
	g, err := b.client.Group(b.ctx, "q", "g")
	if err != nil {
		t.Fatal(err)
	}
	if g.Resize == nil || g.Resize.Cutover == 0 || len(g.Resize.Remaining) != 2 {
		t.Fatalf("want a resize past its cutover with both old slots left, got %+v", g.Resize)
	}
	before := p.count.Load()
	pgtest.WaitFor(t, 30*time.Second, "events sent after the failed handoffs", func() (bool, error) { return p.count.Load() >= before+50, nil })
	if err := lock.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := b.client.WaitResize(wctx, "q", "g", 20*time.Millisecond); err != nil {
		dumpEngine(t, b)
		t.Fatalf("the resize did not end once the lock was gone: %v", err)
	}
	sent := p.end()
	r := h.settled(sent, nil)
	if !r.OK() {
		t.Errorf("%s; examples: %s", r, strings.Join(r.Examples, "; "))
	}
}

// A resize of a quiet queue does not wait for the queue's next tick: with
// no event to tick for, the engine's ticker ticks at growing intervals
// (each gap about twice the one before, up to the queue's
// ticker_idle_period, a minute by default), so a group quiet for a while
// would wait up to that long for its cutover. Resize asks the ticker for
// a tick at its next run; the cutover and the handoffs follow within
// seconds. The test waits for a gap of 8 s between ticks (the next would
// come about 16 s later) and wants the resize done within 8 s: without
// the ask, it waits for that tick and fails.
func TestResizeOfAQuietQueueDoesNotWaitForItsNextTick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	h := newRunLog(0, 0, 0)
	b.worker(t, partitionq.WorkerConfig{Handler: h, Identity: "w"})
	if _, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "tenant-1", Type: "t", Payload: []byte(`{"seq":0}`)}); err != nil {
		t.Fatal(err)
	}
	const gap = 8 * time.Second
	pgtest.WaitFor(t, 60*time.Second, "the event handled and two ticks 8 s apart", func() (bool, error) {
		h.mu.Lock()
		handled := len(h.log)
		h.mu.Unlock()
		var last time.Duration
		err := b.pool.QueryRow(b.ctx, b.db.SQL(`select coalesce(max(t.tick_time) - (select t2.tick_time from pgq.tick t2 where t2.tick_queue = q.queue_id
			order by t2.tick_id desc offset 1 limit 1), '0') from pgq.tick t join pgq.queue q on q.queue_id = t.tick_queue where q.queue_name = 'q' group by q.queue_id`)).Scan(&last)
		return handled >= 1 && last >= gap, err
	})
	if _, err := b.client.Resize(b.ctx, partitionq.ResizeRequest{Queue: "q", Group: "g", Slots: 4, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(b.ctx, gap)
	defer cancel()
	g, err := b.client.WaitResize(wctx, "q", "g", 20*time.Millisecond)
	if err != nil {
		dumpEngine(t, b)
		t.Fatalf("the resize of a quiet queue did not end within %s: %v", gap, err)
	}
	if g.Slots != 4 {
		t.Fatalf("after the resize the group has %d slots, want 4", g.Slots)
	}
}

// AbortResize before the cutover: the group is back at its slots, the
// audit trail says so (Outcome and Detail), and a second abort, with
// nothing in flight, is refused and changes nothing.
func TestAbortResize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 2) // no worker: nothing hands off, the cutover never begins
	if _, err := b.client.Resize(b.ctx, partitionq.ResizeRequest{Queue: "q", Group: "g", Slots: 4, Reason: "grow"}); err != nil {
		t.Fatal(err)
	}
	var ve *partitionq.ValidationError
	if err := b.client.AbortResize(b.ctx, partitionq.AbortResizeRequest{Group: "g"}); !errors.As(err, &ve) {
		t.Fatalf("AbortResize without a queue: %v, want a ValidationError", err)
	}
	if g, err := b.client.Group(b.ctx, "q", "g"); err != nil || g.Resize == nil {
		t.Fatalf("after a refused abort: %+v, %v; want the resize still in flight", g, err)
	}
	if err := b.client.AbortResize(b.ctx, partitionq.AbortResizeRequest{Queue: "q", Group: "g", Reason: "changed my mind", Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	g, err := b.client.Group(b.ctx, "q", "g")
	if err != nil || g.Slots != 2 || g.Resize != nil {
		t.Fatalf("after the abort: %+v, %v; want 2 slots, no resize in flight", g, err)
	}
	if err := b.client.AbortResize(b.ctx, partitionq.AbortResizeRequest{Queue: "q", Group: "g", Reason: "again"}); err == nil {
		t.Fatal("a second abort, with no resize in flight, succeeded")
	}
	es, err := b.client.Audit(b.ctx, "q", "g", 10)
	if err != nil {
		t.Fatal(err)
	}
	var aborted []partitionq.AuditEntry
	for _, e := range es {
		if e.Action == partitionq.AuditResize && e.Outcome == partitionq.OutcomeResizeAborted {
			aborted = append(aborted, e)
		}
	}
	if len(aborted) != 1 || aborted[0].Detail != "2 to 4 slots" || aborted[0].Actor != "alice" || aborted[0].Reason != "changed my mind" ||
		aborted[0].OutcomeText() != "aborted: 2 to 4 slots" {
		t.Fatalf("audit entries of the abort: %+v (of %+v), want one, 2 to 4 slots, by alice", aborted, es)
	}
}
