package cli_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/partitionq/partitionq/internal/cli"
)

func TestSendOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	out := h.ok("send", "--queue", "q", "--key", "tenant-1", "--type", "FileCreated", "--payload", `{"path":"/a"}`)
	if !strings.Contains(out, `sent 1 event to queue "q" (event id `) {
		t.Errorf("send printed %q", out)
	}
	raw := h.raw("send", "--queue", "q", "--key", "tenant-2", "--payload", "plain text")
	pinKeys(t, "send", raw, "queue", "sent", "first_event_id", "last_event_id")

	evs := h.events("q")
	if len(evs) != 2 {
		t.Fatalf("want 2 events, got %+v", evs)
	}
	if e := evs[0]; e.Key != "tenant-1" || e.Type != "FileCreated" || e.Data != `{"path":"/a"}` {
		t.Errorf("first event stored as %+v", e)
	}
	if e := evs[1]; e.Key != "tenant-2" || e.Type != "" || e.Data != "plain text" {
		t.Errorf("second event stored as %+v", e)
	}
}

func TestSendLines(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	in := strings.Join([]string{
		`{"key":"a","type":"T","payload":{"n": 1, "s":"x"}}`,
		``,
		`{"key":"b","payload":"a string, stored as itself"}`,
		`{"key":"c"}`,
		`{"key":"d","payload":null}`,
		`{"key":"e","payload":[1,2]}` + "\r",
		`  {"key":"f","payload":42}  `,
	}, "\n")
	r := h.runStdin(in, "send", "--queue", "q")
	if r.code != cli.ExitOK || !strings.Contains(r.stdout, `sent 6 events to queue "q"`) {
		t.Fatalf("send: %s", r)
	}
	want := []storedEvent{
		{Key: "a", Type: "T", Data: `{"n": 1, "s":"x"}`},
		{Key: "b", Data: "a string, stored as itself"},
		{Key: "c"}, {Key: "d"},
		{Key: "e", Data: "[1,2]"},
		{Key: "f", Data: "42"},
	}
	got := h.events("q")
	if len(got) != len(want) {
		t.Fatalf("stored %+v", got)
	}
	for i := range want {
		got[i].ID = 0
		if got[i] != want[i] {
			t.Errorf("event %d stored as %+v, want %+v", i, got[i], want[i])
		}
	}

	// More than one batch: all of it, in order.
	var b strings.Builder
	for i := range 2500 {
		fmt.Fprintf(&b, `{"key":"k%d","type":"Bulk","payload":{"i":%d}}`+"\n", i%7, i)
	}
	r = h.runStdin(b.String(), "send", "--queue", "q", "--json")
	if r.code != cli.ExitOK {
		t.Fatalf("bulk send: %s", r)
	}
	if !strings.Contains(r.stdout, `"sent": 2500`) {
		t.Errorf("bulk send printed %s", r.stdout)
	}
	got = h.events("q")[6:]
	if len(got) != 2500 {
		t.Fatalf("stored %d bulk events, want 2500", len(got))
	}
	for i, e := range got {
		if e.Data != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("bulk event %d stored as %+v", i, e)
		}
	}

	// Empty input sends nothing and is not an error.
	if r := h.runStdin("\n\n", "send", "--queue", "q"); r.code != cli.ExitOK || !strings.Contains(r.stdout, "sent 0 events") {
		t.Errorf("empty input: %s", r)
	}
}

// A bad line is reported by its number and nothing of the input is sent,
// not even the batches before it.
func TestSendMalformedSendsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	good := strings.Repeat(`{"key":"k","payload":{"ok":true}}`+"\n", 1500)
	cases := []struct {
		in   string
		line int
		want string
	}{
		{good + `{"key":"k","payload":` + "\n" + good, 1501, "malformed JSON"},
		{`{"key":"a"}` + "\n" + `{"key":"a"}` + "\n" + `{"payload":{}}` + "\n", 3, `invalid key ""`},
		{`{"key":"a","payloud":1}` + "\n", 1, `unknown field "payloud"`},
		{`{"key":"a"} {"key":"b"}` + "\n", 1, "more than one value"},
		{"\n" + `["a"]` + "\n", 2, "malformed JSON"},
		{`{"key":"a","payload":"nul \u0000 inside"}` + "\n", 1, "NUL byte"},
		{`{"key":"a","type":7}` + "\n", 1, "malformed JSON"},
	}
	for _, c := range cases {
		r := h.runStdin(c.in, "send", "--queue", "q")
		h.expect(r, cli.ExitFailed, []string{fmt.Sprintf("line %d: ", c.line), c.want, "nothing was sent"}, []string{"send"})
		if r.stdout != "" {
			t.Errorf("a failed send printed %q", r.stdout)
		}
	}
	if evs := h.events("q"); len(evs) != 0 {
		t.Fatalf("failed sends stored %d events", len(evs))
	}
}
