package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
)

// payload is the body of every demo event.
type payload struct {
	Run  string `json:"run"`  // the run that sent it
	Seq  int    `json:"seq"`  // its position in its tenant's sent order, from 0
	Path string `json:"path"` // the file
	Size int    `json:"size"` // its size in bytes (0 for FileDeleted)
	// Bulk marks the events of a folder upload (a burst of one tenant).
	// They never fail: the burst shows a hot key, not a broken one, and a
	// thousand events stuck behind a failing head would make the end of
	// the demo wait for them.
	Bulk bool `json:"bulk,omitempty"`
}

// Event types.
const (
	FileCreated     = "FileCreated"
	FileOverwritten = "FileOverwritten"
	FileDeleted     = "FileDeleted"
)

// ledger records what was sent and every handler call, for the progress
// summary and the order check. It is safe for concurrent use.
type ledger struct {
	mu       sync.Mutex
	sent     map[string]int    // events sent per tenant (seqs 0..n-1)
	handled  map[string][]bool // per tenant, by seq: handled successfully
	nSent    int64
	nHandled int64 // distinct events handled
	calls    int64
	failures int64
	log      []ordercheck.Handling // every handler call, in the order they returned
}

func newLedger() *ledger {
	return &ledger{sent: map[string]int{}, handled: map[string][]bool{}}
}

// addSent records that n more events of key were sent.
func (l *ledger) addSent(key string, n int) {
	l.mu.Lock()
	l.sent[key] += n
	l.nSent += int64(n)
	l.mu.Unlock()
}

// call records one handler call. Calls of one key never overlap (the
// worker runs them one at a time), so the log holds each key's calls in
// the order they happened.
func (l *ledger) call(key string, seq int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	l.log = append(l.log, ordercheck.Handling{Key: key, Seq: seq, OK: ok})
	if !ok {
		l.failures++
		return
	}
	h := l.handled[key]
	for len(h) <= seq {
		h = append(h, false)
	}
	if !h[seq] {
		h[seq] = true
		l.nHandled++
	}
	l.handled[key] = h
}

func (l *ledger) progress() Progress {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Progress{Sent: l.nSent, Handled: l.nHandled, Calls: l.calls, Failures: l.failures}
}

// unresolved counts events sent that are neither handled nor in dead.
func (l *ledger) unresolved(dead map[string][]int) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.nSent - l.nHandled
	for k, seqs := range dead {
		for _, s := range seqs {
			if s < l.sent[k] && (s >= len(l.handled[k]) || !l.handled[k][s]) {
				n--
			}
		}
	}
	return n
}

// snapshot copies what the order check needs.
func (l *ledger) snapshot() (sent map[string]int, log []ordercheck.Handling) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent = make(map[string]int, len(l.sent))
	for k, n := range l.sent {
		sent[k] = n
	}
	return sent, append([]ordercheck.Handling(nil), l.log...)
}

// service is the storage service's event handler: it "stores" the file
// (a short wait that grows with its size) and fails some events on
// purpose. It is safe for concurrent use.
type service struct {
	run      string
	failRate float64
	led      *ledger
}

func newService(run string, failRate float64, led *ledger) *service {
	return &service{run: run, failRate: failRate, led: led}
}

// fate says how an event of this run fails: poison events fail on every
// attempt, others fail their first failures attempts. It is a pure
// function of the event, so it holds across retries and re-deliveries.
func fate(run, key string, seq int, failRate float64) (failures int, poison bool) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s/%d", run, key, seq)
	sum := mix(h.Sum64())
	u := float64(sum>>11) / (1 << 53)
	if u >= failRate {
		return 0, false
	}
	if u < failRate*PoisonShare {
		return 0, true
	}
	return 1 + int(sum%3), false
}

// mix is splitmix64's finalizer: FNV's high bits barely change between
// similar short inputs, and u below is read from the high bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// workTime is how long storing the event takes.
func workTime(typ string, size int) time.Duration {
	if typ == FileDeleted {
		return time.Millisecond
	}
	return time.Millisecond + time.Duration(size)*time.Millisecond/(1<<20)
}

// storageNodes name where the simulated uploads go, for the error texts.
var storageNodes = []string{"s3-eu-1", "s3-eu-2", "s3-us-1", "gcs-eu-1"}

// Handle implements partitionq.Handler.
func (s *service) Handle(ctx context.Context, ev *partitionq.Event) error {
	var p payload
	if err := json.Unmarshal(ev.Payload, &p); err != nil || p.Run != s.run {
		// Not this run's: nothing to do (the demo's queue is its own, so
		// this does not happen unless someone sends to it).
		return nil
	}
	t := time.NewTimer(workTime(ev.Type, p.Size))
	select {
	case <-ctx.Done():
		t.Stop()
		s.led.call(ev.Key, p.Seq, false)
		return ctx.Err()
	case <-t.C:
	}
	failures, poison := fate(s.run, ev.Key, p.Seq, s.failRate)
	if p.Bulk {
		failures, poison = 0, false
	}
	switch {
	case poison:
		s.led.call(ev.Key, p.Seq, false)
		return fmt.Errorf("%s %s: corrupt file: checksum mismatch (the upload is damaged; it will fail on every attempt)", ev.Type, p.Path)
	case ev.Attempt <= failures:
		s.led.call(ev.Key, p.Seq, false)
		node := storageNodes[(p.Seq+len(ev.Key))%len(storageNodes)]
		return fmt.Errorf("%s %s: write to storage node %s: %w (attempt %d)", ev.Type, p.Path, node, errTimeout, ev.Attempt)
	}
	s.led.call(ev.Key, p.Seq, true)
	return nil
}

var errTimeout = errors.New("i/o timeout")
