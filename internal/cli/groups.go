package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// groupsJSON is the --json output of groups (docs/cli.md).
type groupsJSON struct {
	Groups []groupJSON `json:"groups"`
}

type groupJSON struct {
	Queue        string           `json:"queue"`
	Group        string           `json:"group"`
	SlotCount    int              `json:"slot_count"`
	Generation   int              `json:"generation"`
	Resize       *resizeStateJSON `json:"resize"` // null when no resize is in flight
	OwnedSlots   int              `json:"owned_slots"`
	Workers      []string         `json:"workers"`
	Backlog      int64            `json:"backlog"`
	LagSeconds   float64          `json:"lag_seconds"`
	SetAside     int64            `json:"set_aside"`
	BlockedKeys  int              `json:"blocked_keys"`
	DrainingKeys int              `json:"draining_keys"`
	DeadLetters  int64            `json:"dead_letters"`
	Broken       string           `json:"broken"`
	Dropped      bool             `json:"dropped"`
}

func toGroupJSON(g partitionq.GroupOverview) groupJSON {
	ws := g.Workers
	if ws == nil {
		ws = []string{}
	}
	return groupJSON{Queue: g.Queue, Group: g.Group, SlotCount: g.Slots, Generation: g.Generation, Resize: toResizeJSON(g.Resize), OwnedSlots: g.Owned, Workers: ws, Backlog: g.Backlog,
		LagSeconds: seconds(g.Lag), SetAside: g.SetAside, BlockedKeys: g.BlockedKeys, DrainingKeys: g.DrainingKeys,
		DeadLetters: g.DeadLetters, Broken: g.Broken, Dropped: g.Dropped}
}

func (a *app) groupsCmd() *cobra.Command {
	var (
		queue  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "List every consumer group of every queue: slots owned, workers, backlog, blocked keys, dead letters",
		Long: `List every consumer group of every queue (or of --queue): its number of
slots N, how many a live worker owns and which workers, its backlog (the
engine's pending count of its slowest slot: events of the queue, all keys,
it has not read yet), its lag (the oldest slot's), its set-aside events,
blocked and draining keys, and dead letters not yet replayed. A few
queries for all groups at once, whatever their number.`,
		Example: "  partitionq groups\n  partitionq groups --json",
		Args:    noWords,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if queue != "" {
				if err := partitionq.ValidateQueueName(queue); err != nil {
					return err
				}
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			gs, err := s.client.Groups(cmd.Context(), partitionq.GroupsQuery{Queue: queue})
			if errors.Is(err, partitionq.ErrNoSuchQueue) {
				// No such queue: no groups, but for those of a queue dropped
				// by the engine's own drop_queue whose dead letters wait
				// (listed dropped, as in the list of every group).
				gs, err = groupsOf(cmd.Context(), s.client, queue)
			}
			if err != nil {
				return err
			}
			if asJSON {
				out := groupsJSON{Groups: make([]groupJSON, 0, len(gs))}
				for _, g := range gs {
					out.Groups = append(out.Groups, toGroupJSON(g))
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printGroups(cmd.OutOrStdout(), gs)
		}),
	}
	cmd.Flags().StringVar(&queue, "queue", "", "only the groups of this queue")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// groupsOf returns the groups of every queue that are on queue.
func groupsOf(ctx context.Context, c *partitionq.Client, queue string) ([]partitionq.GroupOverview, error) {
	all, err := c.Groups(ctx, partitionq.GroupsQuery{})
	if err != nil {
		return nil, err
	}
	var gs []partitionq.GroupOverview
	for _, g := range all {
		if g.Queue == queue {
			gs = append(gs, g)
		}
	}
	return gs, nil
}

func printGroups(w io.Writer, gs []partitionq.GroupOverview) error {
	if len(gs) == 0 {
		_, err := fmt.Fprintln(w, "no consumer groups: set one up with partitionq setup")
		return err
	}
	tb := newTable(w, "QUEUE", "GROUP", "SLOTS", "OWNED", "WORKERS", "BACKLOG", "LAG", "SET ASIDE", "BLOCKED", "DRAINING", "DEAD LETTERS").
		widths(map[string]int{"WORKERS": 60})
	var broken, resizing []string
	for _, g := range gs {
		if g.Dropped {
			tb.row(g.Queue, g.Group, "dropped", "-", "-", "-", "-", "-", "-", "-", i64(g.DeadLetters))
			broken = append(broken, fmt.Sprintf("group %s on queue %s was dropped and has %s not yet replayed: partitionq dlq list --queue %s --group %s (then dlq replay or dlq purge)",
				quote(g.Group), quote(g.Queue), plural(g.DeadLetters, "dead letter"), g.Queue, g.Group))
			continue
		}
		workers := strings.Join(g.Workers, ", ")
		slots := strconv.Itoa(g.Slots)
		if r := g.Resize; r != nil {
			slots = fmt.Sprintf("%d->%d", r.From, r.To)
			resizing = append(resizing, fmt.Sprintf("group %s on queue %s is resizing %s", quote(g.Group), quote(g.Queue), resizeLine(r)))
		}
		tb.row(g.Queue, g.Group, slots, fmt.Sprintf("%d/%d", g.Owned, g.Slots), dash(workers), i64(g.Backlog), fmtDur(g.Lag),
			i64(g.SetAside), strconv.Itoa(g.BlockedKeys), strconv.Itoa(g.DrainingKeys), i64(g.DeadLetters))
		if g.Broken != "" {
			broken = append(broken, fmt.Sprintf("group %s on queue %s: %s", quote(g.Group), quote(g.Queue), g.Broken))
		}
	}
	if err := tb.flush(); err != nil {
		return err
	}
	for _, b := range append(resizing, broken...) {
		if _, err := fmt.Fprintln(w, b); err != nil {
			return err
		}
	}
	return nil
}
