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
	DeadLetters int64            `json:"dead_letters"`
	At          time.Time        `json:"at"`
	Slots       []slotStatusJSON `json:"slots"`
}

type slotStatusJSON struct {
	Slot            int        `json:"slot"`
	Consumer        string     `json:"consumer"`
	Owner           *ownerJSON `json:"owner"`
	LagSeconds      float64    `json:"lag_seconds"`
	LastSeenSeconds float64    `json:"last_seen_seconds"`
	InBatch         bool       `json:"in_batch"`
	QueuePending    int64      `json:"queue_pending"`
	PendingEstimate int64      `json:"pending_estimate"`
	BlockedKeys     int        `json:"blocked_keys"`
	DrainingKeys    int        `json:"draining_keys"`
	SetAside        int64      `json:"set_aside"`
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
}

func toStatusJSON(gs partitionq.GroupStatus) statusJSON {
	out := statusJSON{Queue: gs.Queue, Group: gs.Group, Engine: gs.Engine, SlotCount: gs.Slots, DeadLetters: gs.DeadLetters,
		At: utc(gs.At), Slots: make([]slotStatusJSON, 0, len(gs.SlotStatus))}
	for _, s := range gs.SlotStatus {
		j := slotStatusJSON{Slot: s.Slot, Consumer: s.Consumer, LagSeconds: seconds(s.Lag), LastSeenSeconds: seconds(s.LastSeen),
			InBatch: s.InBatch, QueuePending: s.QueuePending, PendingEstimate: s.PendingEstimate, BlockedKeys: s.BlockedKeys,
			DrainingKeys: s.DrainingKeys, SetAside: s.SetAside}
		if o := s.Owner; o != nil {
			j.Owner = &ownerJSON{Name: o.Name, Host: o.Host, PID: o.PID, BackendPID: o.BackendPID, Addr: o.Addr, Since: optTime(o.Since),
				Epoch: o.Epoch, LeaseLeftSeconds: seconds(o.LeaseLeft)}
		}
		out.Slots = append(out.Slots, j)
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
		Short: "Show each slot: owner, lag, pending events, blocked keys, set-aside events",
		Long: `Show the status of every slot of a group: its engine consumer, the worker
that owns it (its name, and the pid of its PostgreSQL backend: a server
process, not the worker's), its lag (age of the last tick it finished),
its pending events, its blocked and draining keys and set-aside events;
and the group's dead letters not yet replayed.

PENDING (est.) is the queue's pending events divided by the number of
slots: an estimate of the slot's share, exact only when keys spread evenly.
Read-only and cheap. It waits at most --timeout for the database.`,
		Example: "  partitionq status --queue files --group indexer --json",
		Args:    cobra.NoArgs,
		RunE: runFor(&t, func(cmd *cobra.Command, _ []string) error {
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
	fmt.Fprintf(w, "queue %q, group %q: %d slots, engine %s\n\n", gs.Queue, gs.Group, gs.Slots, gs.Engine)
	tb := newTable(w, "SLOT", "CONSUMER", "OWNER", "LAG", "PENDING (est.)", "BLOCKED KEYS", "DRAINING", "SET ASIDE").
		widths(map[string]int{"OWNER": 80})
	for _, s := range gs.SlotStatus {
		owner := "-"
		if o := s.Owner; o != nil {
			owner = fmt.Sprintf("%s (process %d on %s, backend pid %d", o.Name, o.PID, o.Host, o.BackendPID)
			if o.Addr != "" {
				owner += ", " + o.Addr
			}
			owner += ")"
		}
		lag := fmtDur(s.Lag)
		if s.InBatch {
			lag += " (in batch)"
		}
		tb.row(strconv.Itoa(s.Slot), s.Consumer, owner, lag, "~"+i64(s.PendingEstimate), strconv.Itoa(s.BlockedKeys), strconv.Itoa(s.DrainingKeys), i64(s.SetAside))
	}
	if err := tb.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\ndead letters (not replayed): %d\n", gs.DeadLetters)
	return err
}
