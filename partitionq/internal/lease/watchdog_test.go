package lease

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The watchdog, on a fake clock: a lease renewed by a request sent at t0
// is valid until t0 + TTL - Margin, and at that moment (not a moment
// later) every slot is stopped; a renewal sent before then moves the
// deadline, and a slot whose renewal came too late is not acted on. The
// worker's deadline always comes before the server's (t0 + TTL at the
// earliest), so a worker stops before anyone may take its slots.
func TestTheWatchdogStopsEverySlotAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl, margin = 5 * time.Second, time.Second
		var mu sync.Mutex
		lost := map[int]time.Duration{}
		start := time.Now()
		h := New(Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), TTL: ttl, Margin: margin,
			OnGain: func(int, int64, string) {},
			OnLose: func(s int, why string) {
				mu.Lock()
				lost[s] = time.Since(start)
				mu.Unlock()
			}})
		h.mu.Lock()
		h.owned[0], h.owned[1] = 7, 9
		h.mu.Unlock()
		h.setDeadline(0) // renewed by a request sent now
		stopped := func() map[int]time.Duration {
			mu.Lock()
			defer mu.Unlock()
			out := map[int]time.Duration{}
			for s, at := range lost {
				out[s] = at
			}
			return out
		}

		// Renewals sent every second keep it valid.
		for range 3 {
			time.Sleep(time.Second)
			if !h.Valid() {
				t.Fatalf("the lease is not valid %s after a renewal", time.Since(start))
			}
			h.setDeadline(time.Since(h.start))
		}
		renewed := time.Since(start)
		synctest.Wait()
		if got := stopped(); len(got) != 0 {
			t.Fatalf("slots stopped while the lease was renewed on time: %v", got)
		}
		if _, ok := h.Epoch(0); !ok {
			t.Fatal("slot 0 is not owned while the lease is valid")
		}

		// No renewal: the slots stop at renewed + TTL - Margin exactly.
		time.Sleep(ttl - margin - time.Nanosecond)
		synctest.Wait()
		if got := stopped(); !h.Valid() || len(got) != 0 {
			t.Fatalf("at %s, before the deadline, valid %v and stopped %v", time.Since(start), h.Valid(), got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		want := renewed + ttl - margin
		if got := stopped(); len(got) != 2 || got[0] != want || got[1] != want {
			t.Fatalf("slots stopped at %v, want both at %s (the server's lease ends at %s at the earliest)", got, want, renewed+ttl)
		}
		if h.Valid() {
			t.Fatal("the lease is still valid past its deadline")
		}
		if _, ok := h.Epoch(0); ok {
			t.Fatal("a slot is still owned after the watchdog fired")
		}
	})
}

// A renewal whose request was sent long ago (it hung) moves the deadline
// only from when it was sent: a worker never counts its lease from when
// the answer came.
func TestALateRenewalCountsFromItsRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl, margin = 5 * time.Second, time.Second
		fired := make(chan time.Duration, 1)
		start := time.Now()
		h := New(Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), TTL: ttl, Margin: margin,
			OnGain: func(int, int64, string) {},
			OnLose: func(int, string) { fired <- time.Since(start) }})
		h.mu.Lock()
		h.owned[3] = 1
		h.mu.Unlock()
		h.setDeadline(0)
		sent := time.Since(h.start)
		time.Sleep(3 * time.Second) // the renewal's answer comes 3 s after its request
		h.setDeadline(sent)
		time.Sleep(ttl)
		synctest.Wait()
		select {
		case at := <-fired:
			if want := sent + ttl - margin; at != want {
				t.Fatalf("the slot stopped at %s, want %s (the request's time + TTL - Margin)", at, want)
			}
		default:
			t.Fatal("the slot was not stopped")
		}
	})
}
