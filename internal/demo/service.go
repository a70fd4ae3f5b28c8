package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

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
	begin := s.led.begin()
	done := func(ok bool) { s.led.call(ev.ID, ev.Key, p.Seq, ok, begin) }
	t := time.NewTimer(workTime(ev.Type, p.Size))
	select {
	case <-ctx.Done():
		t.Stop()
		done(false)
		return ctx.Err()
	case <-t.C:
	}
	failures, poison := fate(s.run, ev.Key, p.Seq, s.failRate)
	if p.Bulk {
		failures, poison = 0, false
	}
	switch {
	case poison:
		done(false)
		return fmt.Errorf("%s %s: corrupt file: checksum mismatch, the upload is damaged", ev.Type, p.Path)
	case ev.Attempt <= failures:
		done(false)
		node := storageNodes[(p.Seq+len(ev.Key))%len(storageNodes)]
		return fmt.Errorf("%s %s: write to storage node %s: %w (attempt %d)", ev.Type, p.Path, node, errTimeout, ev.Attempt)
	}
	done(true)
	return nil
}

var errTimeout = errors.New("i/o timeout")
