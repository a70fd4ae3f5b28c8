package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/tui"
)

// statusJSON is the --json output of status (docs/cli.md).
type statusJSON struct {
	Queue       string           `json:"queue"`
	Group       string           `json:"group"`
	Engine      string           `json:"engine"`
	SlotCount   int              `json:"slot_count"`
	Generation  int              `json:"generation"`
	Resize      *resizeStateJSON `json:"resize"` // null when no resize is in flight
	DeadLetters int64            `json:"dead_letters"`
	Pending     int64            `json:"pending"`
	PendingMax  int64            `json:"pending_max"`
	Rates       ratesJSON        `json:"rates"`
	Ticks       ticksJSON        `json:"ticks"`
	At          time.Time        `json:"at"`
	Slots       []slotStatusJSON `json:"slots"`
	Workers     []workerJSON     `json:"workers"`
}

// workerJSON is one live worker of the group (partitionq.WorkerStatus).
type workerJSON struct {
	Name   string `json:"name"`
	Host   string `json:"host"`
	PID    int32  `json:"pid"`
	Member string `json:"member"`
	// Pinned is null for a worker that shares the slots with the others.
	Pinned   []int `json:"pinned"`
	Slots    []int `json:"slots"`
	OldSlots []int `json:"old_slots"`
	Share    int   `json:"share"`
}

// ticksJSON is the queue's newest tick (docs/cli.md, status).
type ticksJSON struct {
	AgeSeconds *float64 `json:"age_seconds"` // null: no tick at all
	Unticked   int64    `json:"unticked"`
	Stalled    bool     `json:"stalled"`
	Warning    string   `json:"warning"`
}

// resizeStateJSON is a resize in flight (partitionq.ResizeState).
type resizeStateJSON struct {
	From       int       `json:"from"`
	To         int       `json:"to"`
	Generation int       `json:"generation"`
	StartedAt  time.Time `json:"started_at"`
	StartedBy  string    `json:"started_by"`
	Actor      string    `json:"actor"`
	Reason     string    `json:"reason"`
	// CutoverTick is null until the queue has the tick at which the new
	// slots take over.
	CutoverTick *int64 `json:"cutover_tick"`
	// Remaining lists the old slots not yet handed off.
	Remaining []int `json:"remaining"`
}

// slotResizeJSON is one slot's part in a resize in flight.
type slotResizeJSON struct {
	Old       bool  `json:"old"`
	AtCutover bool  `json:"at_cutover"`
	Parents   []int `json:"parents"`
	Waiting   []int `json:"waiting"`
}

func toResizeJSON(r *partitionq.ResizeState) *resizeStateJSON {
	if r == nil {
		return nil
	}
	j := &resizeStateJSON{From: r.From, To: r.To, Generation: r.Generation, StartedAt: utc(r.StartedAt), StartedBy: r.StartedBy,
		Actor: r.Actor, Reason: r.Reason, Remaining: append([]int{}, r.Remaining...)}
	if r.Cutover != 0 {
		c := r.Cutover
		j.CutoverTick = &c
	}
	return j
}

type slotStatusJSON struct {
	Slot int `json:"slot"`
	// Slots is the number of slots of the slot's generation (during a
	// resize the old slots are listed too, with the old number).
	Slots           int             `json:"slots"`
	Resize          *slotResizeJSON `json:"resize"` // null when no resize is in flight
	Consumer        string          `json:"consumer"`
	Owner           *ownerJSON      `json:"owner"`
	MovingTo        string          `json:"moving_to"` // "" when the slot is not being handed over
	LagSeconds      float64         `json:"lag_seconds"`
	LastSeenSeconds float64         `json:"last_seen_seconds"`
	InBatch         bool            `json:"in_batch"`
	Pending         int64           `json:"pending"`
	PendingMax      int64           `json:"pending_max"`
	OldestSeconds   float64         `json:"oldest_seconds"`
	// SinceFinishSeconds is null when the slot never finished a batch.
	SinceFinishSeconds *float64  `json:"since_finish_seconds"`
	Rates              ratesJSON `json:"rates"`
	QueuePending       int64     `json:"queue_pending"`
	BlockedKeys        int       `json:"blocked_keys"`
	DrainingKeys       int       `json:"draining_keys"`
	SetAside           int64     `json:"set_aside"`
}

// ratesJSON is partitionq.Rates: events per second.
type ratesJSON struct {
	Handled10s float64 `json:"handled_10s"`
	Failed10s  float64 `json:"failed_10s"`
	Handled1m  float64 `json:"handled_1m"`
	Failed1m   float64 `json:"failed_1m"`
}

func toRatesJSON(r partitionq.Rates) ratesJSON {
	return ratesJSON{Handled10s: r.Handled10s, Failed10s: r.Failed10s, Handled1m: r.Handled1m, Failed1m: r.Failed1m}
}

type ownerJSON struct {
	Name string `json:"name"`
	Host string `json:"host"`
	// PID is the worker's own process (on Host); BackendPID the PostgreSQL
	// server process of its lease session (0 through a pooler).
	PID              int32      `json:"pid"`
	BackendPID       int32      `json:"backend_pid"`
	Addr             string     `json:"addr"`
	Since            *time.Time `json:"since"` // when the worker took the slot
	Epoch            int64      `json:"epoch"`
	LeaseLeftSeconds float64    `json:"lease_left_seconds"`
	Member           string     `json:"member"`
}

func toStatusJSON(gs partitionq.GroupStatus) statusJSON {
	out := statusJSON{Queue: gs.Queue, Group: gs.Group, Engine: gs.Engine, SlotCount: gs.Slots, Generation: gs.Generation,
		Resize: toResizeJSON(gs.Resize), DeadLetters: gs.DeadLetters,
		Pending: gs.Pending, PendingMax: gs.PendingMax, Rates: toRatesJSON(gs.Rates), At: utc(gs.At), Slots: make([]slotStatusJSON, 0, len(gs.SlotStatus)),
		Workers: make([]workerJSON, 0, len(gs.Workers)),
		Ticks:   ticksJSON{Unticked: gs.Ticks.Unticked, Stalled: gs.Ticks.Stalled, Warning: tickWarning(gs)}}
	if gs.Ticks.Age >= 0 {
		age := seconds(gs.Ticks.Age)
		out.Ticks.AgeSeconds = &age
	}
	for _, s := range gs.SlotStatus {
		j := slotStatusJSON{Slot: s.Slot, Slots: s.Slots, Consumer: s.Consumer, LagSeconds: seconds(s.Lag), LastSeenSeconds: seconds(s.LastSeen),
			InBatch: s.InBatch, Pending: s.Pending, PendingMax: s.PendingMax, OldestSeconds: seconds(s.Oldest), Rates: toRatesJSON(s.Rates),
			QueuePending: s.QueuePending, BlockedKeys: s.BlockedKeys, DrainingKeys: s.DrainingKeys, SetAside: s.SetAside, MovingTo: s.MovingTo}
		if s.SinceFinish >= 0 {
			f := seconds(s.SinceFinish)
			j.SinceFinishSeconds = &f
		}
		if r := s.Resize; r != nil {
			j.Resize = &slotResizeJSON{Old: r.Old, AtCutover: r.AtCutover, Parents: append([]int{}, r.Parents...), Waiting: append([]int{}, r.Waiting...)}
		}
		if o := s.Owner; o != nil {
			j.Owner = &ownerJSON{Name: o.Name, Host: o.Host, PID: o.PID, BackendPID: o.BackendPID, Addr: o.Addr, Since: optTime(o.Since),
				Epoch: o.Epoch, LeaseLeftSeconds: seconds(o.LeaseLeft), Member: o.Member}
		}
		out.Slots = append(out.Slots, j)
	}
	for _, w := range gs.Workers {
		out.Workers = append(out.Workers, workerJSON{Name: w.Name, Host: w.Host, PID: w.PID, Member: w.Member, Pinned: w.Pinned,
			Slots: append([]int{}, w.Slots...), OldSlots: append([]int{}, w.OldSlots...), Share: w.Share})
	}
	return out
}

func (a *app) statusCmd() *cobra.Command {
	var (
		t       target
		asJSON  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each slot: owner, lag, pending events, rates, blocked keys, set-aside events",
		Long: `Show the status of every slot of a group: its engine consumer, the worker
that owns it (its name, and the pid of its PostgreSQL backend: a server
process, not the worker's), its lag (age of the last tick it finished),
its pending events (exact: its own share not yet finished) and the age of
the oldest of them, how long ago it last finished a batch, its handled and
failed events per second over the last 10 s and minute (every worker's),
its blocked and draining keys and set-aside events; and the group's dead
letters not yet replayed.

Read-only; one scan of the group's unfinished events counts every slot's
pending. It waits at most --timeout for the database.`,
		Example: "  partitionq status --queue files --group indexer --json",
		Args:    noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usagef("invalid --timeout %s: give a positive duration, such as %s", timeout, tui.RefreshTimeoutDefault)
			}
			ctx, cancel := context.WithTimeoutCause(cmd.Context(), timeout, fmt.Errorf("status waits at most %s: --timeout", timeout))
			defer cancel()
			s, err := a.openFor(ctx, t)
			if err != nil {
				return err
			}
			defer s.close()
			gs, err := s.client.Status(ctx, t.queue, t.group)
			if err != nil {
				return deadlinePassed(ctx, err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), toStatusJSON(gs))
			}
			return printStatus(cmd.OutOrStdout(), gs)
		}),
	}
	t.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", tui.RefreshTimeoutDefault, "the longest status waits for the database (connecting included) before it fails")
	return cmd
}

func printStatus(w io.Writer, gs partitionq.GroupStatus) error {
	fmt.Fprintf(w, "queue %q, group %q: %s (generation %d), engine %s\n", gs.Queue, gs.Group, plural(int64(gs.Slots), "slot"), gs.Generation, gs.Engine)
	if r := gs.Resize; r != nil {
		fmt.Fprintf(w, "resize: %s\n", resizeLine(r))
	}
	fmt.Fprintln(w)
	tb := newTable(w, "SLOT", "CONSUMER", "OWNER", "LAG", "PENDING", "OLDEST", "FINISHED", "HANDLED/S 10S 1M", "FAILED/S 10S 1M",
		"BLOCKED KEYS", "DRAINING", "SET ASIDE").
		widths(map[string]int{"OWNER": 80})
	for _, s := range gs.SlotStatus {
		owner := "-"
		if o := s.Owner; o != nil {
			owner = fmt.Sprintf("%s (process %d on %s, backend pid %d", o.Name, o.PID, o.Host, o.BackendPID)
			if o.Addr != "" {
				owner += ", " + o.Addr
			}
			owner += ")"
			if s.MovingTo != "" {
				owner += ", moving to " + s.MovingTo
			}
		}
		lag := fmtDur(s.Lag)
		if s.InBatch {
			lag += " (in batch)"
		}
		oldest, finished := "-", "never"
		if s.Pending > 0 {
			oldest = fmtDur(s.Oldest)
		}
		if s.SinceFinish >= 0 {
			finished = fmtDur(s.SinceFinish) + " ago"
		}
		tb.row(slotLabel(gs, s), s.Consumer, owner, lag, pendingText(s.Pending, s.PendingMax), oldest, finished,
			fmtRate(s.Rates.Handled10s)+" "+fmtRate(s.Rates.Handled1m), fmtRate(s.Rates.Failed10s)+" "+fmtRate(s.Rates.Failed1m),
			strconv.Itoa(s.BlockedKeys), strconv.Itoa(s.DrainingKeys), i64(s.SetAside))
	}
	if err := tb.flush(); err != nil {
		return err
	}
	if err := printWorkers(w, gs); err != nil {
		return err
	}
	r := gs.Rates
	_, err := fmt.Fprintf(w, "\npending: %s; handled/s: %s (10s), %s (1m); failed/s: %s (10s), %s (1m)\ndead letters (not replayed): %d\n",
		pendingText(gs.Pending, gs.PendingMax), fmtRate(r.Handled10s), fmtRate(r.Handled1m), fmtRate(r.Failed10s), fmtRate(r.Failed1m), gs.DeadLetters)
	if err == nil && gs.PendingMax != gs.Pending {
		_, err = fmt.Fprintf(w, "\npending is a range: counted, and at most that plus the events sent since the count stopped (the queue's census is catching up; each call counts more)\n")
	}
	if err == nil && gs.Ticks.Stalled {
		_, err = fmt.Fprintf(w, "\nwarning: %s\n", tickWarning(gs))
	}
	return err
}

// printWorkers lists the group's live workers, the slots each owns and its
// share.
func printWorkers(w io.Writer, gs partitionq.GroupStatus) error {
	if len(gs.Workers) == 0 {
		_, err := fmt.Fprintf(w, "\nworkers: none live\n")
		return err
	}
	fmt.Fprintf(w, "\n")
	tb := newTable(w, "WORKER", "PROCESS", "SLOTS", "SHARE", "OWNS").widths(map[string]int{"WORKER": 60})
	for _, x := range gs.Workers {
		share := strconv.Itoa(x.Share)
		if x.Pinned != nil {
			share += " (pinned to " + joinInts(x.Pinned) + ")"
		}
		owns := "-"
		if len(x.Slots) > 0 {
			owns = joinInts(x.Slots)
		}
		if len(x.OldSlots) > 0 {
			owns += fmt.Sprintf("; old %s", joinInts(x.OldSlots))
		}
		tb.row(x.Name, fmt.Sprintf("%d on %s", x.PID, x.Host), strconv.Itoa(len(x.Slots)), share, owns)
	}
	return tb.flush()
}

// tickWarning says that events wait and no tick comes, and what to do; ""
// when ticks come.
func tickWarning(gs partitionq.GroupStatus) string {
	t := gs.Ticks
	if !t.Stalled {
		return ""
	}
	since := "the queue has no tick at all"
	if t.Age >= 0 {
		since = "no tick for " + fmtDur(t.Age)
	}
	return fmt.Sprintf("%s on queue %q while %s wait after it: no slot reads them until the next tick; %s",
		since, gs.Queue, plural(t.Unticked, "event"), t.Fix())
}

// fmtRate writes events per second with one decimal below 100, none above.
func fmtRate(r float64) string {
	if r >= 100 {
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}

// resizeLine says where a resize in flight stands, in one line.
func resizeLine(r *partitionq.ResizeState) string {
	cut := "waiting for the cutover tick (the queue's next tick; is a ticker running?)"
	if r.Cutover != 0 {
		cut = fmt.Sprintf("cutover at tick %d", r.Cutover)
	}
	left := "none"
	if len(r.Remaining) > 0 {
		left = joinInts(r.Remaining)
	}
	return fmt.Sprintf("from %d to %d slots, started %s by %s; %s; old slots not handed off yet: %s",
		r.From, r.To, fmtTime(r.StartedAt), r.StartedBy, cut, left)
}

// slotLabel is a slot's SLOT column: its number, and during a resize what
// it does (an old slot as "3/4": slot 3 of the 4-slot generation).
func slotLabel(gs partitionq.GroupStatus, s partitionq.SlotStatus) string {
	r := s.Resize
	switch {
	case r == nil:
		return strconv.Itoa(s.Slot)
	case r.Old && r.AtCutover:
		return fmt.Sprintf("%d/%d at cutover", s.Slot, s.Slots)
	case r.Old:
		return fmt.Sprintf("%d/%d drains", s.Slot, s.Slots)
	case len(r.Waiting) > 0:
		return fmt.Sprintf("%d waits for %s", s.Slot, joinInts(r.Waiting))
	}
	return strconv.Itoa(s.Slot)
}

// pendingText is an exact count, or a range "lo..hi" when the count is not
// exact (never an estimate).
func pendingText(lo, hi int64) string {
	if hi == lo {
		return i64(lo)
	}
	return i64(lo) + ".." + i64(hi)
}
