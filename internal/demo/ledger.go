package demo

import "sync"

// ledger records what was sent and every handler call, for the progress
// summary and the order check. It knows events by their engine event id:
// an operator's replay of a dead letter is an event of its own (a new id,
// at the tail of its tenant's order) with the payload, so the seq, of the
// event it replays; telling the two apart by id keeps a replay from being
// counted as its original. Every record takes a tick of the ledger's
// clock, one order for sends and calls as they happened. It is safe for
// concurrent use.
type ledger struct {
	mu       sync.Mutex
	clock    uint64              // ticks of the ledger: sends and calls, in order
	sent     map[string]int      // events sent per tenant (seqs 0..n-1)
	byID     map[int64]sentEvent // the producer's events, by event id
	handled  map[int64]bool      // event ids handled successfully (the producer's and replays)
	nHandled int64               // len(handled)
	log      []call              // every handler call, in the order they returned
	failures int64
}

// sentEvent is one event the producer sent.
type sentEvent struct {
	key string
	seq int
	at  uint64 // the tick at which its send had committed
}

// call is one handler call.
type call struct {
	id         int64 // the event id
	key        string
	seq        int // from the payload: a replay carries its original's
	ok         bool
	begin, end uint64 // ticks when it started and returned
}

func newLedger() *ledger {
	return &ledger{sent: map[string]int{}, byID: map[int64]sentEvent{}, handled: map[int64]bool{}}
}

// tick advances the clock; callers hold mu.
func (l *ledger) tick() uint64 {
	l.clock++
	return l.clock
}

// addSent records events the producer sent (committed), with their ids.
func (l *ledger) addSent(keys []string, seqs []int, ids []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at := l.tick()
	for i, id := range ids {
		l.byID[id] = sentEvent{key: keys[i], seq: seqs[i], at: at}
		l.sent[keys[i]] = max(l.sent[keys[i]], seqs[i]+1)
	}
}

// begin marks the start of a handler call and returns its tick.
func (l *ledger) begin() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tick()
}

// call records one handler call of event id, begun at tick begin. Calls of
// one key never overlap (the worker runs them one at a time), so the log
// holds each key's calls in the order they happened.
func (l *ledger) call(id int64, key string, seq int, ok bool, begin uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, call{id: id, key: key, seq: seq, ok: ok, begin: begin, end: l.tick()})
	if !ok {
		l.failures++
		return
	}
	if !l.handled[id] {
		l.handled[id] = true
		l.nHandled++
	}
}

func (l *ledger) progress() Progress {
	l.mu.Lock()
	defer l.mu.Unlock()
	var sent int64
	for _, n := range l.sent {
		sent += int64(n)
	}
	return Progress{Sent: sent, Handled: l.nHandled, Calls: int64(len(l.log)), Failures: l.failures}
}

// unresolved counts the events (the producer's, and the replays known from
// dead letters or handler calls) that are neither handled nor dead: dead
// holds the event ids of the dead letters, replays the ids of replays.
func (l *ledger) unresolved(dead map[int64]bool, replays map[int64]bool) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	open := func(id int64) bool { return !l.handled[id] && !dead[id] }
	for id := range l.byID {
		if open(id) {
			n++
		}
	}
	seen := map[int64]bool{}
	for _, c := range l.log {
		if _, ours := l.byID[c.id]; !ours && !seen[c.id] {
			seen[c.id] = true
			if open(c.id) {
				n++
			}
		}
	}
	for id := range replays {
		if _, ours := l.byID[id]; !ours && !seen[id] && open(id) {
			n++
		}
	}
	return n
}

// event returns the producer's event id, if it is one.
func (l *ledger) event(id int64) (sentEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.byID[id]
	return e, ok
}

// snapshot copies what the order check needs.
func (l *ledger) snapshot() (sent map[string]int, byID map[int64]sentEvent, log []call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent = make(map[string]int, len(l.sent))
	for k, n := range l.sent {
		sent[k] = n
	}
	byID = make(map[int64]sentEvent, len(l.byID))
	for id, e := range l.byID {
		byID[id] = e
	}
	return sent, byID, append([]call(nil), l.log...)
}
