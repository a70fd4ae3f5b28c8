package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
)

// deadLetters reads the group's dead letters of this run: the event ids
// that died, and the event ids of the replays operators made of them.
// ctx governs the queries.
func (d *Demo) deadLetters(ctx context.Context) (dead, replays map[int64]bool, err error) {
	dead, replays = map[int64]bool{}, map[int64]bool{}
	err = d.eachDeadLetter(ctx, func(dl partitionq.DeadLetter, _ payload) {
		dead[dl.EventID] = true
		if dl.ReplayID != nil {
			replays[*dl.ReplayID] = true
		}
	})
	return dead, replays, err
}

func (d *Demo) eachDeadLetter(ctx context.Context, fn func(partitionq.DeadLetter, payload)) error {
	var after int64
	for {
		page, err := d.c.DeadLetters(ctx, partitionq.DeadLetterQuery{Queue: d.cfg.Queue, Group: d.cfg.Group, AfterID: after, Limit: 1000})
		if err != nil {
			return err
		}
		for _, dl := range page {
			var p payload
			if json.Unmarshal(dl.Payload, &p) == nil && p.Run == d.run {
				fn(dl, p)
			}
			after = dl.ID
		}
		if len(page) < 1000 {
			return nil
		}
	}
}

// Result is the verdict of a run.
type Result struct {
	// Report judges the producer's events (internal/ordercheck): lost
	// events, per-tenant order violations and repeats.
	ordercheck.Report
	Tenants  int // tenants that sent at least one event
	Calls    int // handler calls judged (replays' included)
	Failures int // of which failed
	// DeadBy counts the producer's events that ended as dead letters, by
	// how: "attempts" (ran out of MaxAttempts), "skipped", "quarantined",
	// "other".
	DeadBy map[string]int
	// Replays judges the operators' replays of dead letters.
	Replays ReplayReport
}

// OK reports a clean run: nothing lost, no order violation, replays
// included.
func (r Result) OK() bool { return r.Report.OK() && r.Replays.OK() }

// ReplayReport is the verdict on the replays of dead letters made during a
// run. A replay is an event of its own, sent at the tail of its tenant's
// order: it must end handled or dead, must not run before the events of
// its tenant sent before it (those committed before its original was given
// up), and nothing else of its tenant may be handled while it is failing.
type ReplayReport struct {
	Replays    int // replay events seen (in dead letters or handler calls)
	Handled    int // of which handled successfully
	Dead       int // of which dead letters again
	Lost       int // neither
	Violations int
	Repeats    int // successful handlings of a replay already resolved
	Examples   []string
}

// OK reports no replay lost and no order violation.
func (r ReplayReport) OK() bool { return r.Lost == 0 && r.Violations == 0 }

// Check judges the run: from what the producer sent, every handler call,
// and the dead letters in the database, it counts lost events, per-tenant
// order violations and repeats, the producer's events by
// internal/ordercheck and the replays by checkReplays. Call it once the
// events are resolved (WaitResolved); events still waiting count as lost.
// ctx governs the dead-letter queries.
func (d *Demo) Check(ctx context.Context) (Result, error) {
	var dls []partitionq.DeadLetter
	if err := d.eachDeadLetter(ctx, func(dl partitionq.DeadLetter, _ payload) { dls = append(dls, dl) }); err != nil {
		return Result{}, err
	}
	sent, byID, log := d.led.snapshot()
	return judge(sent, byID, log, dls), nil
}

// judge is Check on what was read.
func judge(sent map[string]int, byID map[int64]sentEvent, log []call, dls []partitionq.DeadLetter) Result {
	res := Result{DeadBy: map[string]int{}, Tenants: len(sent), Calls: len(log)}
	dead := map[string][]int{} // the producer's dead events, as seqs of their tenants
	deadIDs := map[int64]bool{}
	replayOf := map[int64]int64{} // replay event id -> the event it replays
	for _, dl := range dls {
		deadIDs[dl.EventID] = true
		if dl.ReplayID != nil {
			replayOf[*dl.ReplayID] = dl.EventID
		}
		e, ours := byID[dl.EventID]
		if !ours {
			continue // a replay's dead letter: judged with the replays
		}
		dead[e.key] = append(dead[e.key], e.seq)
		switch {
		case dl.Reason == "max_attempts":
			res.DeadBy["attempts"]++
		case strings.HasPrefix(dl.Reason, "skip"):
			res.DeadBy["skipped"]++
		case strings.HasPrefix(dl.Reason, "quarantine"):
			res.DeadBy["quarantined"]++
		default:
			res.DeadBy["other"]++
		}
	}
	var producer []ordercheck.Handling
	for _, c := range log {
		if !c.ok {
			res.Failures++
		}
		if _, ours := byID[c.id]; ours {
			producer = append(producer, ordercheck.Handling{Key: c.key, Seq: c.seq, OK: c.ok})
		} else if _, known := replayOf[c.id]; !known {
			replayOf[c.id] = 0 // a replay seen only by the handler (its dead letter not read)
		}
	}
	res.Report = ordercheck.Check(sent, producer, dead)
	res.Replays = checkReplays(byID, log, deadIDs, replayOf)
	return res
}

// checkReplays judges the replays (replayOf: replay event id -> the event
// it replays, 0 when unknown) against the log of calls and the dead
// letters' event ids.
func checkReplays(byID map[int64]sentEvent, log []call, deadIDs map[int64]bool, replayOf map[int64]int64) ReplayReport {
	var r ReplayReport
	calls := map[int64][]call{} // by event id, in order
	byKey := map[string][]call{}
	for _, c := range log {
		calls[c.id] = append(calls[c.id], c)
		byKey[c.key] = append(byKey[c.key], c)
	}
	example := func(format string, args ...any) {
		if len(r.Examples) < 5 {
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}
	// resolvedAt is the tick from which event id counts as resolved, and
	// whether it is: its first success, or (a dead letter) the end of its
	// last failed call (0: never called).
	resolvedAt := func(id int64) (uint64, bool) {
		var lastFail uint64
		for _, c := range calls[id] {
			if c.ok {
				return c.end, true
			}
			lastFail = c.end
		}
		return lastFail, deadIDs[id]
	}
	for id, orig := range replayOf {
		r.Replays++
		cs := calls[id]
		until, resolved := resolvedAt(id)
		switch {
		case !resolved:
			r.Lost++
			example("replay %d: neither handled nor dead", id)
			continue
		case anyOK(cs):
			r.Handled++
		default:
			r.Dead++
		}
		for i, c := range cs {
			if c.ok && i > 0 && anyOK(cs[:i]) {
				r.Repeats++
			}
		}
		if len(cs) == 0 {
			continue // quarantined or skipped before it ran: nothing to judge
		}
		key, first := cs[0].key, cs[0].begin
		// Nothing else of its tenant succeeds while it is failing.
		for _, c := range byKey[key] {
			if c.id != id && c.ok && c.begin > first && c.begin < until {
				r.Violations++
				example("key %s: event %d handled while replay %d was failing", key, c.id, id)
			}
		}
		// It does not overtake the events of its tenant committed before its
		// original was given up (the end of the original's last failed call).
		gaveUp, _ := resolvedAt(orig)
		if gaveUp == 0 {
			continue // its original never ran (quarantined while waiting): no bound known
		}
		for eid, e := range byID {
			if e.key != key || e.at >= gaveUp {
				continue
			}
			if at, ok := resolvedAt(eid); !ok || at > first {
				r.Violations++
				example("key %s: replay %d ran before event %d (seq %d), sent before it, was resolved", key, id, eid, e.seq)
			}
		}
	}
	return r
}

func anyOK(cs []call) bool {
	for _, c := range cs {
		if c.ok {
			return true
		}
	}
	return false
}
