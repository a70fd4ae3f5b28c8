package cli

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// keysJSON is the --json output of keys (docs/cli.md).
type keysJSON struct {
	Queue   string           `json:"queue"`
	Group   string           `json:"group"`
	Pending int64            `json:"pending"`
	Exact   bool             `json:"exact"`
	Sampled int64            `json:"sampled"`
	Top     []keyPendingJSON `json:"top"`
	Busiest []keyPendingJSON `json:"busiest"`
	Oldest  []keyAgeJSON     `json:"oldest"`
}

type keyPendingJSON struct {
	Key     string `json:"key"`
	Slot    int    `json:"slot"`
	Pending int64  `json:"pending"`
	Error   int64  `json:"error"`
}

type keyAgeJSON struct {
	Slot          int     `json:"slot"`
	Key           string  `json:"key"`
	OldestSeconds float64 `json:"oldest_seconds"`
}

func toKeysJSON(hk partitionq.HotKeys) keysJSON {
	out := keysJSON{Queue: hk.Queue, Group: hk.Group, Pending: hk.Pending, Exact: hk.Exact, Sampled: hk.Sampled,
		Top: []keyPendingJSON{}, Busiest: []keyPendingJSON{}, Oldest: []keyAgeJSON{}}
	for _, k := range hk.Top {
		out.Top = append(out.Top, keyPendingJSON(k))
	}
	for _, k := range hk.Busiest {
		out.Busiest = append(out.Busiest, keyPendingJSON(k))
	}
	for _, k := range hk.Oldest {
		out.Oldest = append(out.Oldest, keyAgeJSON{Slot: k.Slot, Key: k.Key, OldestSeconds: seconds(k.Age)})
	}
	return out
}

func (a *app) keysCmd() *cobra.Command {
	var (
		t      target
		top    int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "List the keys with the most pending events (hot keys), each slot's busiest key, and the oldest",
		Long: `List the keys of a group with the most pending events (events of their
slot's share not yet finished), the busiest key of each slot, and the key
of each slot's oldest pending event. In bounded time at any backlog: up to
200,000 pending events every one is counted (exact); above, about 30,000 are
sampled and each key's count is an estimate with its 95% error (± N).
Keyless events count under the key "". Read-only. See docs/operations.md,
a hot tenant.`,
		Example: "  partitionq keys --queue files --group indexer --top 10",
		Args:    noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if top < 1 || top > 10000 {
				return usagef("invalid --top %d: give 1 to 10000 (default 10)", top)
			}
			s, err := a.openFor(cmd.Context(), t)
			if err != nil {
				return err
			}
			defer s.close()
			hk, err := s.client.HotKeys(cmd.Context(), t.queue, t.group, top)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), toKeysJSON(hk))
			}
			return printKeys(cmd.OutOrStdout(), hk)
		}),
	}
	t.bind(cmd.Flags())
	cmd.Flags().IntVar(&top, "top", 10, "how many keys to list, the most pending first")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printKeys(w io.Writer, hk partitionq.HotKeys) error {
	how := fmt.Sprintf("exact: all %s counted", plural(hk.Pending, "pending event"))
	if !hk.Exact {
		how = fmt.Sprintf("estimated from a sample of %s of %s, ± a 95%% interval", plural(hk.Sampled, "event"), plural(hk.Pending, "pending event"))
	}
	fmt.Fprintf(w, "the keys of group %q on queue %q with the most pending events (%s):\n", hk.Group, hk.Queue, how)
	if len(hk.Top) == 0 {
		_, err := fmt.Fprintln(w, "none: nothing pending")
		return err
	}
	count := func(k partitionq.KeyPending) string {
		if hk.Exact {
			return i64(k.Pending)
		}
		return fmt.Sprintf("%d ± %d", k.Pending, k.Error)
	}
	tb := newTable(w, "KEY", "SLOT", "PENDING", "SHARE")
	for _, k := range hk.Top {
		tb.row(keyCell(k.Key), strconv.Itoa(k.Slot), count(k), share(k.Pending, hk.Pending))
	}
	if err := tb.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nthe busiest key of each slot, and its oldest pending event's key:")
	oldest := map[int]partitionq.KeyAge{}
	for _, o := range hk.Oldest {
		oldest[o.Slot] = o
	}
	tb = newTable(w, "SLOT", "BUSIEST KEY", "PENDING", "OLDEST KEY", "OLDEST")
	for _, k := range hk.Busiest {
		o, ok := oldest[k.Slot]
		busiest, oldKey, age := "-", "-", "-"
		if k.Pending > 0 {
			busiest = keyCell(k.Key)
		}
		if ok {
			oldKey, age = keyCell(o.Key), fmtDur(o.Age)
		}
		tb.row(strconv.Itoa(k.Slot), busiest, count(k), oldKey, age)
	}
	return tb.flush()
}

// share is n of total as a percentage.
func share(n, total int64) string {
	if total <= 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(n)/float64(total), 'f', 1, 64) + "%"
}

// keyCell is a key in a table cell (the table escapes it); keyless events
// are "(no key)".
func keyCell(k string) string {
	if k == "" {
		return "(no key)"
	}
	return k
}
