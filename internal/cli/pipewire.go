package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// The messages of work --pipe (docs/handlers.md): JSON lines, one object
// per line. The worker writes requests on the process's standard input and
// the process answers each, once, on its standard output, in any order.
//
// A request carries the events of one key in "events": one, or with
// work --runs a run of them (up to --max-run); a reply answers a request
// by its "req", and a failure of a run names its first event not done by
// its "index" in "events".

// pipeHandle is the request line that hands the process events:
// {"op":"handle",...}.
type pipeHandle struct {
	Op     string      `json:"op"` // "handle"
	Req    uint64      `json:"req"`
	Queue  string      `json:"queue"`
	Group  string      `json:"group"`
	Slot   int         `json:"slot"`
	Slots  int         `json:"slots"`
	Epoch  int64       `json:"epoch"`
	Fence  string      `json:"fence"`
	Key    string      `json:"key"`
	Events []pipeEvent `json:"events"`
}

// pipeEvent is one event of a request.
type pipeEvent struct {
	ID      int64  `json:"id"`
	Type    string `json:"type"`
	Time    string `json:"time"`
	Attempt int    `json:"attempt"`
	Payload string `json:"payload"`
}

// pipeCancel is the request line that cancels a request: {"op":"cancel","req":N}.
type pipeCancel struct {
	Op  string `json:"op"` // "cancel"
	Req uint64 `json:"req"`
}

// encodeHandle is the request line that hands evs (one event, or a run of
// one key's) to the process as request req.
func encodeHandle(req uint64, evs []*partitionq.Event) []byte {
	ev := evs[0]
	pe := make([]pipeEvent, len(evs))
	for i, e := range evs {
		pe[i] = pipeEvent{ID: e.ID, Type: e.Type, Time: e.Time.UTC().Format(time.RFC3339Nano), Attempt: e.Attempt, Payload: string(e.Payload)}
	}
	return encodeLine(pipeHandle{Op: "handle", Req: req, Queue: ev.Queue, Group: ev.Group, Slot: ev.Slot, Slots: ev.Slots,
		Epoch: ev.Epoch, Fence: ev.Fence(), Key: ev.Key, Events: pe})
}

// encodeCancel is the request line that cancels request req.
func encodeCancel(req uint64) []byte {
	return encodeLine(pipeCancel{Op: "cancel", Req: req})
}

func encodeLine(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // strings and numbers only: cannot fail
		panic(err)
	}
	return b.Bytes() // ends with the newline Encode writes
}

// pipeReply is a reply line.
type pipeReply struct {
	Req        uint64   `json:"req"`
	Outcome    string   `json:"outcome"`
	Error      string   `json:"error"`
	RetryAfter *float64 `json:"retry_after"`
	// Index is the failed event of a run's request, by its place in the
	// request's "events" (from 0): the events before it are done.
	Index int   `json:"index"`
	bad   error // the reply names its request but is not a valid reply
}

// The outcomes of a reply.
const (
	pipeDone       = "done"
	pipeFailed     = "failed"
	pipeDeadLetter = "dead_letter"
)

// errNotAReply reports a line that names no request.
var errNotAReply = errors.New("not a reply")

// decodeReply reads a reply line. A line that is not a JSON object with a
// request number ("req", 1 or more) is errNotAReply; one that has a
// request number but is otherwise wrong (a field of the wrong type) comes
// back with bad set, for its request to fail.
func decodeReply(line []byte) (pipeReply, error) {
	var r pipeReply
	err := json.Unmarshal(line, &r)
	if err == nil && r.Req > 0 {
		return r, nil
	}
	var named struct {
		Req uint64 `json:"req"`
	}
	if json.Unmarshal(line, &named) != nil || named.Req == 0 {
		if err != nil {
			return pipeReply{}, fmt.Errorf("%w: %v", errNotAReply, err)
		}
		return pipeReply{}, fmt.Errorf("%w: it has no \"req\" (the number of the request it answers)", errNotAReply)
	}
	return pipeReply{Req: named.Req, bad: err}, nil
}

// runResult is the outcome a reply gives to a request of n events: as
// result, and for a failure that names an event after the first, a
// partitionq.RunFailed (the events before it are done). An index outside
// the request fails its first event, saying so.
func (r pipeReply) runResult(n int) error {
	err := r.result()
	switch {
	case err == nil || r.Index == 0:
		return err
	case r.Index < 0 || r.Index >= n:
		return fmt.Errorf("%w (the reply's index %d is not an event of the request's %d: its first event failed)", err, r.Index, n)
	}
	return partitionq.RunFailed(r.Index, err)
}

// result is the handler's outcome a reply gives: nil when done; a failure,
// a dead letter now or a failure retried after a delay otherwise. An
// invalid reply is a failure that says why.
func (r pipeReply) result() error {
	if r.bad != nil {
		return fmt.Errorf("the pipe handler's reply to request %d is not valid (%v): a failure", r.Req, r.bad)
	}
	text := clipText(errorTextOf(r.Error), stderrTailBytes)
	switch r.Outcome {
	case pipeDone:
		return nil
	case pipeDeadLetter:
		return partitionq.DeadLetterNow(errors.New(orUnsaid(text)))
	case pipeFailed:
		if r.RetryAfter != nil {
			d, err := delayOfSeconds(*r.RetryAfter)
			if err != nil {
				return fmt.Errorf("%s (retry_after %v: %v: retried after the backoff)", orUnsaid(text), *r.RetryAfter, err)
			}
			return partitionq.RetryAfter(d, errors.New(orUnsaid(text)))
		}
		return errors.New(orUnsaid(text))
	case "":
		return fmt.Errorf("the pipe handler's reply to request %d has no \"outcome\" (done, failed or dead_letter): a failure", r.Req)
	}
	return fmt.Errorf("the pipe handler's reply to request %d has outcome %s, not done, failed or dead_letter: a failure",
		r.Req, strconv.Quote(clipText(r.Outcome, 64)))
}

func orUnsaid(text string) string {
	if text == "" {
		return "failed (the pipe handler gave no error)"
	}
	return text
}

// errorTextOf is a handler's error text as PostgreSQL can store it: valid
// UTF-8 without NUL bytes, without surrounding white space.
func errorTextOf(s string) string {
	s = strings.ToValidUTF8(s, "")
	s = strings.ReplaceAll(s, "\x00", "")
	return strings.TrimSpace(s)
}

// clipText cuts s to at most n bytes, on a character boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// errLineTooLong reports an output line longer than the bound of readLine;
// it was read to its end and thrown away.
var errLineTooLong = errors.New("line too long")

// readLine reads one line (without its newline) of at most max bytes. A
// longer one is read to its end and dropped: errLineTooLong. The line is
// valid until the next call.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var long []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			if tooLong {
				return nil, errLineTooLong
			}
			if long != nil {
				long = append(long, chunk...)
				return bytes.TrimRight(long, "\r\n"), nil
			}
			return bytes.TrimRight(chunk, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			if !tooLong {
				if len(long)+len(chunk) > max {
					tooLong, long = true, nil
				} else {
					long = append(long, chunk...)
				}
			}
		default: // the end of the output: a last line without a newline counts
			if tooLong {
				return nil, errLineTooLong
			}
			if len(long)+len(chunk) > 0 {
				if err == io.EOF {
					return append(long, chunk...), nil
				}
			}
			return nil, err
		}
	}
}
