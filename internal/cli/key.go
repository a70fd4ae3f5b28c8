package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// keyJSON is the --json output of key (docs/cli.md).
type keyJSON struct {
	Queue string     `json:"queue"`
	Group string     `json:"group"`
	Key   string     `json:"key"`
	Slot  int        `json:"slot"`
	Owner *ownerJSON `json:"owner"`
	State string     `json:"state"`
	// Blocked is the key's entry of blocked --json when it is blocked or
	// draining, null when it flows.
	Blocked            *blockedKeyJSON    `json:"blocked"`
	SetAside           []previewEventJSON `json:"set_aside"`
	DeadLetters        []deadLetterJSON   `json:"dead_letters"`
	DeadLetterCount    int64              `json:"dead_letter_count"`
	PendingDeadLetters int64              `json:"pending_dead_letters"`
	DedupWindowSeconds float64            `json:"dedup_window_seconds"`
	DedupHits          []dedupHitJSON     `json:"dedup_hits"`
	Duplicates         int64              `json:"duplicates"`
}

// dedupHitJSON is a dedup record of the key that refused duplicates.
type dedupHitJSON struct {
	DedupID   string    `json:"dedup_id"`
	EventID   int64     `json:"event_id"`
	Hits      int64     `json:"hits"`
	SentAt    time.Time `json:"sent_at"`
	LastHitAt time.Time `json:"last_hit_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

func toKeyJSON(ki partitionq.KeyInfo) keyJSON {
	out := keyJSON{Queue: ki.Queue, Group: ki.Group, Key: ki.Key, Slot: ki.Slot, State: string(ki.State),
		SetAside: make([]previewEventJSON, 0, len(ki.SetAside)), DeadLetters: make([]deadLetterJSON, 0, len(ki.DeadLetters)),
		DeadLetterCount: ki.DeadLetterCount, PendingDeadLetters: ki.PendingDeadLetters,
		DedupWindowSeconds: seconds(ki.DedupWindow), DedupHits: make([]dedupHitJSON, 0, len(ki.DedupHits)), Duplicates: ki.Duplicates}
	for _, h := range ki.DedupHits {
		out.DedupHits = append(out.DedupHits, dedupHitJSON{DedupID: h.DedupID, EventID: h.EventID, Hits: h.Hits,
			SentAt: utc(h.SentAt), LastHitAt: utc(h.LastHit), ExpiresAt: utc(h.ExpiresAt)})
	}
	if o := ki.Owner; o != nil {
		out.Owner = &ownerJSON{Name: o.Name, Host: o.Host, PID: o.PID, BackendPID: o.BackendPID, Addr: o.Addr, Since: optTime(o.Since),
			Epoch: o.Epoch, LeaseLeftSeconds: seconds(o.LeaseLeft)}
	}
	if ki.Blocked != nil {
		bk := toBlockedKeyJSON(*ki.Blocked)
		out.Blocked = &bk
	}
	for _, ev := range ki.SetAside {
		out.SetAside = append(out.SetAside, previewEventJSON{EventID: ev.ID, Type: ev.Type, Payload: string(ev.Payload), SentAt: utc(ev.Time), Head: ev.Head})
	}
	for _, d := range ki.DeadLetters {
		out.DeadLetters = append(out.DeadLetters, toDeadLetterJSON(d))
	}
	return out
}

func (a *app) keyCmd() *cobra.Command {
	var (
		t      target
		key    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Find a key: its slot and owner, state (flowing, blocked, draining), set-aside events, dead letters",
		Long: `Show one key of a group: the slot it routes to and the worker that owns that
slot; its state: flowing (nothing set aside), blocked (its head failed: its
later events wait) or draining (its failed head was resolved, its waiting
events run next); its events set aside in the slot, in the order they will
run (the head first); its newest dead letters; and its recent dedup hits:
the dedup ids of its events that refused duplicates (send --dedup-id), with
how many each refused. Up to 20 of each are listed, with the totals.`,
		Example: "  partitionq key --queue files --group indexer --key tenant-42",
		Args:    noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			if err := need("key", key, "name the key, e.g. --key tenant-42"); err != nil {
				return err
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			ki, err := s.client.Key(cmd.Context(), t.queue, t.group, key)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), toKeyJSON(ki))
			}
			return printKey(cmd.OutOrStdout(), ki)
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	f.StringVar(&key, "key", "", "the key (required)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printKey(w io.Writer, ki partitionq.KeyInfo) error {
	owner := "no live owner: its events wait for a worker"
	if o := ki.Owner; o != nil {
		owner = fmt.Sprintf("%s (process %d on %s, epoch %d)", o.Name, o.PID, o.Host, o.Epoch)
	}
	state := "flowing: nothing set aside, its events run as they arrive"
	if bk := ki.Blocked; bk != nil {
		switch bk.State {
		case partitionq.KeyDraining:
			state = fmt.Sprintf("draining: its failed event was resolved; event %d and %d after it run next, in order", bk.Head.ID, bk.Waiting)
		default:
			next := "now"
			if !bk.Head.NextAttempt.IsZero() {
				next = fmtTime(bk.Head.NextAttempt)
			}
			state = fmt.Sprintf("blocked since %s on event %d (%s), %d attempts, next %s; %d waiting behind it",
				fmtTime(bk.BlockedSince), bk.Head.ID, dash(bk.Head.Type), bk.Head.Attempts, next, bk.Waiting)
		}
	}
	tb := newFields(w)
	tb.row("key:", ki.Key)
	tb.row("group:", fmt.Sprintf("%s on queue %s", ki.Group, ki.Queue))
	tb.row("slot:", strconv.Itoa(ki.Slot))
	tb.row("owner:", owner)
	tb.row("state:", state)
	if err := tb.flush(); err != nil {
		return err
	}
	if ki.Blocked != nil && ki.Blocked.State == partitionq.KeyBlocked {
		fmt.Fprintf(w, "last error:\n%s\n", indent(dash(ki.Blocked.Head.LastError)))
	}
	if len(ki.SetAside) > 0 {
		fmt.Fprintf(w, "\nset aside, in the order they run (%d shown):\n", len(ki.SetAside))
		tb := newTable(w, "#", "EVENT", "TYPE", "SENT", "PAYLOAD").widths(map[string]int{"TYPE": 24, "PAYLOAD": 60})
		for i, ev := range ki.SetAside {
			tb.row(strconv.Itoa(i+1), i64(ev.ID), dash(ev.Type), fmtTime(ev.Time), string(ev.Payload))
		}
		if err := tb.flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\ndead letters: %d (%d not replayed)", ki.DeadLetterCount, ki.PendingDeadLetters)
	if len(ki.DeadLetters) == 0 {
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, ", newest first (%d shown):\n", len(ki.DeadLetters))
		if err := printDeadLetters(w, ki.DeadLetters); err != nil {
			return err
		}
	}
	return printDedupHits(w, ki)
}

// printDedupHits writes the key's recent dedup hits.
func printDedupHits(w io.Writer, ki partitionq.KeyInfo) error {
	fmt.Fprintf(w, "\nduplicates refused: %d (dedup window %s)", ki.Duplicates, ki.DedupWindow)
	if len(ki.DedupHits) == 0 {
		_, err := fmt.Fprintln(w)
		return err
	}
	fmt.Fprintf(w, ", the most recent first (%d shown):\n", len(ki.DedupHits))
	tb := newTable(w, "DEDUP ID", "EVENT", "HITS", "LAST HIT", "SENT", "EXPIRES").widths(map[string]int{"DEDUP ID": 40})
	for _, h := range ki.DedupHits {
		tb.row(h.DedupID, i64(h.EventID), i64(h.Hits), fmtTime(h.LastHit), fmtTime(h.SentAt), fmtTime(h.ExpiresAt))
	}
	return tb.flush()
}
