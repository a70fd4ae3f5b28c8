package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// previewJSON is the --json output of preview (docs/cli.md).
type previewJSON struct {
	Queue  string             `json:"queue"`
	Group  string             `json:"group"`
	Key    string             `json:"key"`
	State  string             `json:"state"`
	Events []previewEventJSON `json:"events"`
}

type previewEventJSON struct {
	EventID int64     `json:"event_id"`
	Type    string    `json:"type"`
	Payload string    `json:"payload"`
	SentAt  time.Time `json:"sent_at"`
	Head    bool      `json:"head"`
}

func (a *app) previewCmd() *cobra.Command {
	var (
		t      target
		key    string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "preview",
		Short: "Show which events of a blocked key run next, in order",
		Long: `Show the blocked head of a key and the events waiting behind it, in the
order they will run: after a skip of the head, the waiting events run in
this order, then the key's events still in the stream.`,
		Example: "  partitionq preview --queue files --group indexer --key tenant-42",
		Args:    noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			if err := need("key", key, "name the blocked key (see partitionq blocked)"); err != nil {
				return err
			}
			if limit < 1 {
				return usagef("invalid --limit %d: give 1 or more", limit)
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			bk, err := s.client.BlockedKey(cmd.Context(), t.queue, t.group, key)
			if err != nil {
				return err
			}
			evs, err := s.client.Preview(cmd.Context(), t.queue, t.group, key, limit)
			if err != nil {
				return err
			}
			if asJSON {
				out := previewJSON{Queue: t.queue, Group: t.group, Key: key, State: string(bk.State), Events: make([]previewEventJSON, 0, len(evs))}
				for _, ev := range evs {
					out.Events = append(out.Events, previewEventJSON{EventID: ev.ID, Type: ev.Type, Payload: string(ev.Payload), SentAt: utc(ev.Time), Head: ev.Head})
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printPreview(cmd.OutOrStdout(), key, bk.State, evs)
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	f.StringVar(&key, "key", "", "the blocked key (required)")
	f.IntVar(&limit, "limit", 10, "show at most this many waiting events after the head")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printPreview(w io.Writer, key string, state partitionq.KeyState, evs []partitionq.PreviewEvent) error {
	head := "its blocked head (failed), then the events waiting behind it"
	if state == partitionq.KeyDraining {
		head = "it is draining: its failed event was resolved, and these run next without help"
	}
	fmt.Fprintf(w, "key %s runs next, in this order (%s):\n", quote(key), head)
	tb := newTable(w, "#", "EVENT", "TYPE", "SENT", "WHAT", "PAYLOAD").widths(map[string]int{"TYPE": 24, "PAYLOAD": 60})
	for i, ev := range evs {
		what := "waiting"
		switch {
		case ev.Head && state == partitionq.KeyDraining:
			what = "head, never failed"
		case ev.Head:
			what = "blocked head"
		}
		tb.row(strconv.Itoa(i+1), i64(ev.ID), dash(ev.Type), fmtTime(ev.Time), what, string(ev.Payload))
	}
	return tb.flush()
}
