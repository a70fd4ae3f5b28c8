package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/charmbracelet/x/term"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// sendBatchSize is how many events of standard input go into one SendBatchTx.
const sendBatchSize = 1000

// sendJSON is the --json output of send (docs/cli.md). EventID and
// Duplicate are the one event's of the flags; Duplicates the messages of
// standard input refused as duplicates.
type sendJSON struct {
	Queue        string           `json:"queue"`
	Sent         int              `json:"sent"`
	FirstEventID int64            `json:"first_event_id"`
	LastEventID  int64            `json:"last_event_id"`
	EventID      *int64           `json:"event_id,omitempty"`
	Duplicate    *bool            `json:"duplicate,omitempty"`
	Duplicates   *[]duplicateJSON `json:"duplicates,omitempty"`
}

// duplicateJSON is a line of standard input refused as a duplicate.
type duplicateJSON struct {
	Line    int    `json:"line"`
	DedupID string `json:"dedup_id"`
	EventID int64  `json:"event_id"` // the event first sent with the dedup id
}

// add counts the results of a batch whose messages came from lines.
func (r *sendJSON) add(ms []partitionq.Message, lines []int, res []partitionq.SendResult) {
	for i, x := range res {
		if x.Duplicate {
			*r.Duplicates = append(*r.Duplicates, duplicateJSON{Line: lines[i], DedupID: ms[i].DedupID, EventID: x.ID})
			continue
		}
		if r.FirstEventID == 0 {
			r.FirstEventID = x.ID
		}
		r.LastEventID = x.ID
		r.Sent++
	}
}

func (a *app) sendCmd() *cobra.Command {
	var (
		t      target
		m      partitionq.Message
		body   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "send",
		Short: "Send one event from flags, or many as JSON lines from standard input",
		Long: `Send one event given by --key, --type and --payload; or, without --key,
send the JSON lines of standard input, one event per line:

  {"key": "tenant-42", "type": "FileCreated", "payload": {"path": "/a"}}

"key" is required. "payload" is any JSON value, stored as its JSON text;
a JSON string is stored as the string itself. Blank lines are ignored.
Keys, types, payloads and dedup ids are valid UTF-8 without NUL, from flags
and lines alike: invalid bytes, an unpaired surrogate escape ("\ud800") or
a byte order mark are refused, never stored changed (docs/cli.md, the text
rule).

Send once: an event with a dedup id (--dedup-id, or "dedup_id" on a line)
is sent once per queue within the dedup window (the queue's, set by setup
--dedup-window, 1h by default; or --dedup-window, "dedup_window"): a second
send with the same id inserts nothing and is reported as "duplicate of
event N", the event first sent with it.

Standard input is sent all or nothing, in one transaction: every line is
checked before it is sent, and a bad line (reported by its number) or any
error rolls back everything, so nothing is half-sent. Prints how many
events were sent, and each duplicate.`,
		Example: `  partitionq send --queue files --key tenant-42 --type FileCreated --payload '{"path":"/a"}'
  partitionq send --queue files --key tenant-42 --payload '{"path":"/a"}' --dedup-id req-7f3a
  jq -c '.[]' events.json | partitionq send --queue files`,
		Args: noWords,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if err := t.needQueue(); err != nil {
				return err
			}
			fromFlags := cmd.Flags().Changed("key")
			if !fromFlags {
				for _, f := range []string{"type", "payload", "dedup-id", "dedup-window"} {
					if cmd.Flags().Changed(f) {
						return usagef("missing --key: --%s describes one event, which needs a --key (or leave it out to read JSON lines from standard input, where each line may have its own \"dedup_id\" and \"dedup_window\")", f)
					}
				}
			}
			if fromFlags {
				m.Payload = []byte(body)
				if err := m.Validate(); err != nil { // before connecting: Send checks the same
					return err
				}
			}
			ctx := cmd.Context()
			s, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer s.close()
			var res sendJSON
			if fromFlags {
				r, err := s.client.Send(ctx, t.queue, m)
				if err != nil {
					return err
				}
				res = sendJSON{Queue: t.queue, EventID: &r.ID, Duplicate: &r.Duplicate}
				if !r.Duplicate {
					res.Sent, res.FirstEventID, res.LastEventID = 1, r.ID, r.ID
				}
			} else {
				// Fail before reading a long input when the queue is missing:
				// an empty batch checks the queue, with the producer's rights.
				if _, err := s.client.SendBatch(ctx, t.queue, nil); err != nil {
					return err
				}
				if isTerminal(a.env.Stdin) {
					fmt.Fprintln(a.env.Stderr, "partitionq: reading JSON lines from standard input; end with Ctrl-D")
				}
				if res, err = sendLines(ctx, s, t.queue, a.env.Stdin); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			switch {
			case asJSON:
				return writeJSON(out, res)
			case res.Duplicate != nil && *res.Duplicate:
				fmt.Fprintf(out, "duplicate of event %d: not sent again (dedup id %s was sent to queue %q within its dedup window)\n",
					*res.EventID, termsafe.Quote(m.DedupID), res.Queue)
			case res.Duplicates == nil && res.Sent == 1:
				fmt.Fprintf(out, "sent 1 event to queue %q (event id %d)\n", res.Queue, res.FirstEventID)
			default:
				fmt.Fprintf(out, "sent %s to queue %q\n", plural(int64(res.Sent), "event"), res.Queue)
			}
			if res.Duplicates != nil && len(*res.Duplicates) > 0 {
				fmt.Fprintf(out, "%d not sent again, duplicates of events sent within their dedup window:\n", len(*res.Duplicates))
				for _, d := range *res.Duplicates {
					fmt.Fprintf(out, "  line %d: duplicate of event %d (dedup id %s)\n", d.Line, d.EventID, termsafe.Quote(d.DedupID))
				}
			}
			return nil
		}),
	}
	f := cmd.Flags()
	t.bindQueue(f)
	f.StringVar(&m.Key, "key", "", "partition key of one event (without it, read JSON lines from standard input)")
	f.StringVar(&m.Type, "type", "", "event type of the one event")
	f.StringVar(&body, "payload", "", "payload of the one event, stored as given")
	f.StringVar(&m.DedupID, "dedup-id", "", "send the one event once: a send with the same dedup id within the dedup window inserts nothing (up to 512 bytes)")
	f.DurationVar(&m.DedupWindow, "dedup-window", 0, "how long the --dedup-id is remembered (default: the queue's window, see setup --dedup-window)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// sendLines sends the JSON lines of in in one transaction, in batches of
// sendBatchSize. On a bad line or any error nothing is committed.
func sendLines(ctx context.Context, s *session, queue string, in io.Reader) (sendJSON, error) {
	res := sendJSON{Queue: queue, Duplicates: &[]duplicateJSON{}}
	var bodyErr error // an error of the body: the transaction was rolled back
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		defer func() { bodyErr = err }()
		batch := make([]partitionq.Message, 0, sendBatchSize)
		lineOf := make([]int, 0, sendBatchSize)
		flush := func() error {
			sent, err := s.client.SendBatchTx(ctx, tx, queue, batch)
			var be *partitionq.BatchError
			if errors.As(err, &be) && be.Index < len(lineOf) {
				return &inputError{Line: lineOf[be.Index], Err: be.Err}
			}
			var ke *partitionq.DedupKeyError
			if errors.As(err, &ke) && len(lineOf) == 1 {
				return &inputError{Line: lineOf[0], Err: err}
			}
			if err != nil {
				return err
			}
			res.add(batch, lineOf, sent)
			batch, lineOf = batch[:0], lineOf[:0]
			return nil
		}
		readCtx, stopReading := context.WithCancel(ctx)
		defer stopReading()
		lines := readLines(readCtx, in)
		for {
			var l numberedLine
			var ok bool
			select {
			case l, ok = <-lines:
			case <-ctx.Done():
				return fmt.Errorf("reading standard input: %w", ctx.Err())
			}
			if !ok {
				break
			}
			if l.err != nil {
				return &inputError{Line: l.n, Err: l.err}
			}
			m, err := decodeLine(l.text)
			if err != nil {
				return &inputError{Line: l.n, Err: err}
			}
			batch, lineOf = append(batch, m), append(lineOf, l.n)
			if len(batch) == sendBatchSize {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return flush()
	})
	var ie *inputError
	switch {
	case err == nil:
		return res, nil
	case bodyErr != nil && !errors.As(err, &ie):
		return sendJSON{}, fmt.Errorf("%w: nothing was sent", err)
	}
	return sendJSON{}, err
}

// isTerminal reports whether r is a terminal (so a person may be typing).
// A character device is not enough: /dev/null is one too.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(f.Fd())
}
