// Package ordercheck judges a run of a keyed consumer after the fact: from
// what was sent per key and the log of every handling, it counts lost
// events, per-key order violations and repeated deliveries; from the start
// and end of every handler run (runs.go), the overlaps: two runs of one key
// at the same instant. The crash and
// chaos tests and the benchmarks share it, so every system is measured by
// the same rules.
package ordercheck

import "fmt"

// Handling is one handler call, in the order the calls happened.
type Handling struct {
	Key string
	Seq int  // the event's position in its key's sent order, from 0
	OK  bool // the handler succeeded
}

// Report is the verdict.
type Report struct {
	Sent    int // events sent
	Handled int // events handled successfully at least once
	Dead    int // events that ended as dead letters (never handled)
	Lost    int // events neither handled nor dead
	Repeats int // successful handlings of an event already resolved
	// Violations counts successful handlings of an event while an earlier
	// event of its key was still unresolved (not yet handled successfully
	// nor dead-lettered).
	Violations int
	// Runs and Overlaps are set by WithRuns: the handler runs judged, and
	// how many started while another run of the same key was running.
	Runs, Overlaps int
	Examples       []string // a few violations, losses or overlaps, for the failure message
}

// OK reports a clean run: nothing lost, no order violation, no overlap.
func (r Report) OK() bool { return r.Lost == 0 && r.Violations == 0 && r.Overlaps == 0 }

func (r Report) String() string {
	s := fmt.Sprintf("sent %d, handled %d, dead %d, lost %d, repeats %d, order violations %d",
		r.Sent, r.Handled, r.Dead, r.Lost, r.Repeats, r.Violations)
	if r.Runs > 0 {
		s += fmt.Sprintf(", overlaps %d (in %d handler runs)", r.Overlaps, r.Runs)
	}
	return s
}

// Check judges a run. sent gives each key's number of events (seqs 0..n-1);
// log is every handling in the order it happened; dead holds, per key, the
// seqs that became dead letters. A dead letter counts as resolved from its
// last failed handling on.
func Check(sent map[string]int, log []Handling, dead map[string][]int) Report {
	var r Report
	lastFail := map[string]map[int]int{} // key -> dead seq -> index of its last failed handling
	deadSet := map[string]map[int]bool{}
	for k, seqs := range dead {
		deadSet[k] = map[int]bool{}
		lastFail[k] = map[int]int{}
		for _, s := range seqs {
			deadSet[k][s] = true
			lastFail[k][s] = -1
		}
	}
	for i, h := range log {
		if !h.OK && deadSet[h.Key][h.Seq] {
			lastFail[h.Key][h.Seq] = i
		}
	}
	resolved := map[string]map[int]bool{}
	firstUnresolved := map[string]int{} // every seq below it is resolved
	handled := map[string]map[int]bool{}
	advance := func(k string) {
		for resolved[k][firstUnresolved[k]] {
			firstUnresolved[k]++
		}
	}
	markResolved := func(k string, s int) {
		if resolved[k] == nil {
			resolved[k] = map[int]bool{}
		}
		resolved[k][s] = true
		advance(k)
	}
	// A dead letter never failed in the log (e.g. quarantined while waiting)
	// is resolved from the start.
	for k, m := range lastFail {
		for s, i := range m {
			if i < 0 {
				markResolved(k, s)
			}
		}
	}
	for i, h := range log {
		if !h.OK {
			if deadSet[h.Key][h.Seq] && lastFail[h.Key][h.Seq] == i {
				markResolved(h.Key, h.Seq)
			}
			continue
		}
		if handled[h.Key] == nil {
			handled[h.Key] = map[int]bool{}
		}
		if resolved[h.Key][h.Seq] {
			r.Repeats++
			continue
		}
		if firstUnresolved[h.Key] < h.Seq {
			r.Violations++
			if len(r.Examples) < 5 {
				r.Examples = append(r.Examples, fmt.Sprintf("key %s: event %d handled while event %d was unresolved", h.Key, h.Seq, firstUnresolved[h.Key]))
			}
		}
		handled[h.Key][h.Seq] = true
		markResolved(h.Key, h.Seq)
	}
	for k, n := range sent {
		r.Sent += n
		for s := 0; s < n; s++ {
			switch {
			case handled[k][s]:
				r.Handled++
			case deadSet[k][s]:
				r.Dead++
			default:
				r.Lost++
				if len(r.Examples) < 5 {
					r.Examples = append(r.Examples, fmt.Sprintf("key %s: event %d lost", k, s))
				}
			}
		}
	}
	return r
}
