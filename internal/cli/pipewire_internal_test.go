package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// The request line carries every field docs/handlers.md lists, the
// payload as a string, one event in "events".
func TestPipeRequestLine(t *testing.T) {
	ev := &partitionq.Event{ID: 4711, Queue: "files", Group: "indexer", Slot: 1, Slots: 4, Key: "tenant-<42>", Type: "FileCreated",
		Payload: []byte(`{"path":"/a"}`), Time: time.Date(2024, 5, 1, 9, 57, 59, 123456000, time.UTC), Attempt: 2, Epoch: 17}
	line := encodeHandle(9, []*partitionq.Event{ev})
	want := `{"op":"handle","req":9,"queue":"files","group":"indexer","slot":1,"slots":4,"epoch":17,"fence":"files/indexer/4/1/17",` +
		`"key":"tenant-<42>","events":[{"id":4711,"type":"FileCreated","time":"2024-05-01T09:57:59.123456Z","attempt":2,"payload":"{\"path\":\"/a\"}"}]}` + "\n"
	if string(line) != want {
		t.Errorf("request line\n got %s\nwant %s", line, want)
	}
	if got := string(encodeCancel(9)); got != `{"op":"cancel","req":9}`+"\n" {
		t.Errorf("cancel line %s", got)
	}
}

func TestPipeReplies(t *testing.T) {
	for _, c := range []struct {
		line       string
		notReply   bool
		dead       bool
		retryAfter time.Duration
		err        string // "" for done
	}{
		{line: `{"req":1,"outcome":"done"}`},
		{line: `{"req":1,"outcome":"done","error":"ignored","extra":[1,2]}`},
		{line: `{"req":1,"outcome":"failed","error":"disk full"}`, err: "disk full"},
		{line: `{"req":1,"outcome":"failed"}`, err: "failed (the pipe handler gave no error)"},
		{line: `{"req":1,"outcome":"failed","error":"busy","retry_after":2.5}`, retryAfter: 2500 * time.Millisecond, err: "retry after 2.5s: busy"},
		{line: `{"req":1,"outcome":"failed","error":"busy","retry_after":-1}`, err: "busy (retry_after -1: not a delay in seconds: -1: retried after the backoff)"},
		{line: `{"req":1,"outcome":"dead_letter","error":"corrupt"}`, dead: true, err: "dead letter: corrupt"},
		{line: `{"req":1,"outcome":"maybe"}`, err: `has outcome "maybe", not done, failed or dead_letter: a failure`},
		{line: `{"req":1}`, err: `has no "outcome"`},
		{line: `{"req":1,"outcome":7}`, err: "the pipe handler's reply to request 1 is not valid (json: cannot unmarshal number"},
		{line: `{"req":1,"outcome":"failed","error":"a\u0000b"}`, err: "ab"},
		{line: `not json`, notReply: true},
		{line: `[1,2]`, notReply: true},
		{line: `{"outcome":"done"}`, notReply: true},
		{line: `{"req":0,"outcome":"done"}`, notReply: true},
		{line: `{"req":"1","outcome":"done"}`, notReply: true},
	} {
		r, err := decodeReply([]byte(c.line))
		if c.notReply {
			if !errors.Is(err, errNotAReply) {
				t.Errorf("%s: %v, want not a reply", c.line, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.line, err)
			continue
		}
		res := r.result()
		var dl *partitionq.DeadLetterError
		var ra *partitionq.RetryAfterError
		switch {
		case c.err == "" && res != nil, c.err != "" && (res == nil || !strings.Contains(res.Error(), c.err)):
			t.Errorf("%s: result %v, want %q", c.line, res, c.err)
		case errors.As(res, &dl) != c.dead:
			t.Errorf("%s: dead letter %v, want %v", c.line, !c.dead, c.dead)
		case c.retryAfter != 0 && (!errors.As(res, &ra) || ra.Delay() != c.retryAfter):
			t.Errorf("%s: %v, want a retry after %s", c.line, res, c.retryAfter)
		}
	}
}

// Output lines are read to a bound: a longer one is dropped whole, and
// the lines after it are read.
func TestPipeReadLineBound(t *testing.T) {
	long := strings.Repeat("x", 300)
	br := bufio.NewReaderSize(strings.NewReader("a\r\n"+long+"\nb\n"+strings.Repeat("y", 100)+"\nlast"), 16)
	var got []string
	for {
		l, err := readLine(br, 200)
		if errors.Is(err, errLineTooLong) {
			got = append(got, "TOO LONG")
			continue
		}
		if err != nil {
			break
		}
		got = append(got, string(l))
	}
	want := []string{"a", "TOO LONG", "b", strings.Repeat("y", 100), "last"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines %q, want %q", got, want)
	}
}

// A retry-after file holds seconds or a duration; anything else is said.
func TestParseDelay(t *testing.T) {
	for in, want := range map[string]time.Duration{"10": 10 * time.Second, "0.25": 250 * time.Millisecond, "1m30s": 90 * time.Second, "0": time.Millisecond} {
		if d, err := parseDelay(in); err != nil || d != want {
			t.Errorf("parseDelay(%q) = %s, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{"", "soon", "-1", "-1s", "NaN", "1e300"} {
		if d, err := parseDelay(in); err == nil {
			t.Errorf("parseDelay(%q) = %s, want an error", in, d)
		}
	}
}

// docs/cli.md lists every field of the pipe's messages.
func TestPipeFieldsAreDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var req map[string]any
	if err := json.Unmarshal(encodeHandle(1, []*partitionq.Event{{Slots: 1}}), &req); err != nil {
		t.Fatal(err)
	}
	var fields []string
	for k := range req {
		fields = append(fields, k)
	}
	for k := range req["events"].([]any)[0].(map[string]any) {
		fields = append(fields, "events[]."+k)
	}
	fields = append(fields, "req", "outcome", "error", "retry_after") // a reply's
	for _, f := range fields {
		if !strings.Contains(doc, "| `"+f+"`") && !strings.Contains(doc, ", `"+f+"` |") {
			t.Errorf("docs/cli.md does not list the pipe's field %s", f)
		}
	}
	for _, o := range []string{pipeDone, pipeFailed, pipeDeadLetter} {
		if !strings.Contains(doc, `"outcome":"`+o+`"`) {
			t.Errorf("docs/cli.md shows no reply with outcome %s", o)
		}
	}
}
