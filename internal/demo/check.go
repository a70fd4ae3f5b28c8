package demo

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/partitionq"
)

// deadLetters reads the group's dead letters of this run, as the seqs of
// each tenant. ctx governs the queries.
func (d *Demo) deadLetters(ctx context.Context) (map[string][]int, error) {
	dead := map[string][]int{}
	err := d.eachDeadLetter(ctx, func(dl partitionq.DeadLetter, p payload) {
		dead[dl.Key] = append(dead[dl.Key], p.Seq)
	})
	return dead, err
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
	ordercheck.Report
	Tenants  int // tenants that sent at least one event
	Calls    int // handler calls judged
	Failures int // of which failed
	// DeadBy counts the dead letters by how they came to be: "attempts"
	// (ran out of MaxAttempts), "skipped", "quarantined", "other".
	DeadBy map[string]int
}

// Check judges the run with internal/ordercheck: from what the producer
// sent, every handler call, and the dead letters in the database, it counts
// lost events, per-tenant order violations and repeats. Call it once the
// events are resolved (WaitResolved); events still waiting count as lost.
// ctx governs the dead-letter queries.
func (d *Demo) Check(ctx context.Context) (Result, error) {
	dead := map[string][]int{}
	by := map[string]int{}
	err := d.eachDeadLetter(ctx, func(dl partitionq.DeadLetter, p payload) {
		dead[dl.Key] = append(dead[dl.Key], p.Seq)
		switch {
		case dl.Reason == "max_attempts":
			by["attempts"]++
		case strings.HasPrefix(dl.Reason, "skip"):
			by["skipped"]++
		case strings.HasPrefix(dl.Reason, "quarantine"):
			by["quarantined"]++
		default:
			by["other"]++
		}
	})
	if err != nil {
		return Result{}, err
	}
	sent, log := d.led.snapshot()
	res := Result{Report: ordercheck.Check(sent, log, dead), Tenants: len(sent), Calls: len(log), DeadBy: by}
	for _, h := range log {
		if !h.OK {
			res.Failures++
		}
	}
	return res, nil
}
