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
)

// sendBatchSize is how many events of standard input go into one SendBatchTx.
const sendBatchSize = 1000

// sendJSON is the --json output of send (docs/cli.md).
type sendJSON struct {
	Queue        string `json:"queue"`
	Sent         int    `json:"sent"`
	FirstEventID int64  `json:"first_event_id"`
	LastEventID  int64  `json:"last_event_id"`
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
Keys, types and payloads are valid UTF-8 without NUL, from flags and lines
alike: invalid bytes, an unpaired surrogate escape ("\ud800") or a byte
order mark are refused, never stored changed (docs/cli.md, the text rule).

Standard input is sent all or nothing, in one transaction: every line is
checked before it is sent, and a bad line (reported by its number) or any
error rolls back everything, so nothing is half-sent. Prints how many
events were sent.`,
		Example: `  partitionq send --queue files --key tenant-42 --type FileCreated --payload '{"path":"/a"}'
  jq -c '.[]' events.json | partitionq send --queue files`,
		Args: noWords,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if err := t.needQueue(); err != nil {
				return err
			}
			fromFlags := cmd.Flags().Changed("key")
			if !fromFlags && (cmd.Flags().Changed("type") || cmd.Flags().Changed("payload")) {
				return usagef("missing --key: --type and --payload describe one event, which needs a --key (or leave them out to read JSON lines from standard input)")
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
				id, err := s.client.Send(ctx, t.queue, m)
				if err != nil {
					return err
				}
				res = sendJSON{Queue: t.queue, Sent: 1, FirstEventID: id, LastEventID: id}
			} else {
				// Fail before reading a long input when the queue is missing.
				if _, err := s.client.Groups(ctx, t.queue); err != nil {
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
			case res.Sent == 1:
				fmt.Fprintf(out, "sent 1 event to queue %q (event id %d)\n", res.Queue, res.FirstEventID)
			default:
				fmt.Fprintf(out, "sent %s to queue %q\n", plural(int64(res.Sent), "event"), res.Queue)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	t.bindQueue(f)
	f.StringVar(&m.Key, "key", "", "partition key of one event (without it, read JSON lines from standard input)")
	f.StringVar(&m.Type, "type", "", "event type of the one event")
	f.StringVar(&body, "payload", "", "payload of the one event, stored as given")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// sendLines sends the JSON lines of in in one transaction, in batches of
// sendBatchSize. On a bad line or any error nothing is committed.
func sendLines(ctx context.Context, s *session, queue string, in io.Reader) (sendJSON, error) {
	res := sendJSON{Queue: queue}
	var bodyErr error // an error of the body: the transaction was rolled back
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		defer func() { bodyErr = err }()
		batch := make([]partitionq.Message, 0, sendBatchSize)
		lineOf := make([]int, 0, sendBatchSize)
		flush := func() error {
			ids, err := s.client.SendBatchTx(ctx, tx, queue, batch)
			var be *partitionq.BatchError
			if errors.As(err, &be) && be.Index < len(lineOf) {
				return &inputError{Line: lineOf[be.Index], Err: be.Err}
			}
			if err != nil {
				return err
			}
			if len(ids) > 0 {
				if res.FirstEventID == 0 {
					res.FirstEventID = ids[0]
				}
				res.LastEventID = ids[len(ids)-1]
			}
			res.Sent += len(ids)
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
