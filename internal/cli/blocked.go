package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// blockedJSON is the --json output of blocked (docs/cli.md).
type blockedJSON struct {
	Queue       string           `json:"queue"`
	Group       string           `json:"group"`
	BlockedKeys []blockedKeyJSON `json:"blocked_keys"`
}

type blockedKeyJSON struct {
	Key          string    `json:"key"`
	Slot         int       `json:"slot"`
	State        string    `json:"state"`
	Head         headJSON  `json:"head"`
	Waiting      int64     `json:"waiting"`
	BlockedSince time.Time `json:"blocked_since"`
}

type headJSON struct {
	EventID     int64      `json:"event_id"`
	Type        string     `json:"type"`
	Payload     string     `json:"payload"`
	SentAt      time.Time  `json:"sent_at"`
	Attempts    int        `json:"attempts"`
	NextAttempt *time.Time `json:"next_attempt"`
	LastError   string     `json:"last_error"`
}

func toBlockedKeyJSON(bk partitionq.BlockedKey) blockedKeyJSON {
	h := bk.Head
	return blockedKeyJSON{Key: bk.Key, Slot: bk.Slot, State: string(bk.State), Waiting: bk.Waiting, BlockedSince: utc(bk.BlockedSince),
		Head: headJSON{EventID: h.ID, Type: h.Type, Payload: string(h.Payload), SentAt: utc(h.Time), Attempts: h.Attempts,
			NextAttempt: optTime(h.NextAttempt), LastError: h.LastError}}
}

func (a *app) blockedCmd() *cobra.Command {
	var (
		t      target
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "blocked",
		Short: "List the blocked keys: head event, attempts, next retry, waiting events, last error",
		Long: `List the keys whose head event failed and is not resolved, oldest block
first: the head event's id, type and attempts, when it is tried next, how
many events of the key wait behind it, since when the key is blocked, and
the handler's last error. Unblock one with skip, retry or quarantine.

A key shown as draining had its failed head resolved (handled on a retry,
skipped, dead-lettered): its waiting events now run in order, and its head
has never failed. It needs nothing; skip, retry and quarantine refuse it
unless --event names its head.`,
		Example: "  partitionq blocked --queue files --group indexer",
		Args:    noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			s, err := a.openFor(cmd.Context(), t)
			if err != nil {
				return err
			}
			defer s.close()
			bks, err := s.client.BlockedKeys(cmd.Context(), t.queue, t.group)
			if err != nil {
				return err
			}
			if asJSON {
				out := blockedJSON{Queue: t.queue, Group: t.group, BlockedKeys: make([]blockedKeyJSON, 0, len(bks))}
				for _, bk := range bks {
					out.BlockedKeys = append(out.BlockedKeys, toBlockedKeyJSON(bk))
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printBlocked(cmd.OutOrStdout(), bks)
		}),
	}
	t.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printBlocked(w io.Writer, bks []partitionq.BlockedKey) error {
	if len(bks) == 0 {
		_, err := fmt.Fprintln(w, "no blocked keys")
		return err
	}
	tb := newTable(w, "KEY", "SLOT", "STATE", "HEAD", "TYPE", "ATTEMPTS", "NEXT RETRY", "WAITING", "BLOCKED SINCE", "LAST ERROR").
		widths(map[string]int{"KEY": 40, "TYPE": 24, "LAST ERROR": 80})
	for _, bk := range bks {
		next, since, last := "now", fmtTime(bk.BlockedSince), dash(bk.Head.LastError)
		if !bk.Head.NextAttempt.IsZero() {
			next = fmtTime(bk.Head.NextAttempt)
		}
		if bk.State == partitionq.KeyDraining {
			since, last = "-", "(never failed: runs next, in order)"
		}
		tb.row(bk.Key, strconv.Itoa(bk.Slot), string(bk.State), i64(bk.Head.ID), dash(bk.Head.Type), strconv.Itoa(bk.Head.Attempts), next,
			i64(bk.Waiting), since, last)
	}
	return tb.flush()
}
