package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	pinKeys(t, "send", raw, "queue", "sent", "first_event_id", "last_event_id", "event_id", "duplicate")

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

// `{"key":"\xff"}`, `{"key":"\xfe"}` and
// `{"key":"\ud800"}` were all stored as the one key U+FFFD, three tenants
// merged into one, because encoding/json replaces invalid UTF-8 and
// unpaired surrogate escapes. Each is refused now, by line and field, in
// the words of the library's rule (the one --key meets), and nothing of
// the input is sent. Through the real binary, as a user runs it.
func TestSendRefusesTextThatJSONWouldChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	good := `{"key":"tenant-1","payload":{"ok":true}}` + "\n"
	cases := []struct {
		line  string
		field string
		want  string
	}{
		{"{\"key\":\"\xff\"}", `invalid key "\xff"`, "not valid UTF-8"},
		{"{\"key\":\"\xfe\"}", `invalid key "\xfe"`, "not valid UTF-8"},
		{`{"key":"\ud800"}`, `invalid key "\u{d800}"`, "U+D800"},
		{`{"key":"tenant-\uDBFF"}`, `invalid key "tenant-\u{dbff}"`, "U+DBFF"},
		{`{"key":"a\ud800\ud800"}`, `invalid key "a\u{d800}\u{d800}"`, "U+D800"},
		{`{"key":"a\udc00\ud800"}`, `invalid key "a\u{dc00}\u{d800}"`, "U+DC00"},
		{`{"key":"k","type":"a\udc00b"}`, `invalid type "a\u{dc00}b"`, "U+DC00"},
		{"{\"key\":\"k\",\"type\":\"T\xc3\"}", `invalid type "T\xc3"`, "not valid UTF-8"},
		{`{"key":"k","payload":"a\udc00b"}`, `invalid payload "a\u{dc00}b"`, "U+DC00"},
		{"{\"key\":\"k\",\"payload\":\"\xed\xa0\x80\"}", `invalid payload "\u{d800}"`, "U+D800"},
		{"{\"key\":\"k\",\"payload\":{\"path\":\"/a\xff\"}}", `invalid payload "{\"path\":\"/a\xff\"}"`, "not valid UTF-8"},
	}
	for _, c := range cases {
		r := runBinary(t, h.url, good+c.line+"\n"+good, "send", "--queue", "q")
		for _, w := range []string{"partitionq: standard input, line 2: " + c.field, c.want, "nothing was sent"} {
			if r.code != cli.ExitFailed || !strings.Contains(r.stderr, w) {
				t.Errorf("line %q: want exit 1 saying %q, got %s", c.line, w, r)
			}
		}
	}
	if evs := h.events("q"); len(evs) != 0 {
		t.Fatalf("refused inputs stored %+v", evs)
	}

	// What JSON writes as one character is that character: a surrogate
	// pair, and the escape of U+FFFD itself, stored exactly.
	in := `{"key":"\ud83d\ude00","type":"\uD83D\uDE00","payload":"x\ud83d\ude00y"}` + "\n" + `{"key":"\ufffd","payload":{"s":"\ud800"}}` + "\n"
	if r := runBinary(t, h.url, in, "send", "--queue", "q"); r.code != cli.ExitOK {
		t.Fatalf("send: %s", r)
	}
	evs := h.events("q")
	if len(evs) != 2 || evs[0].Key != "😀" || evs[0].Type != "😀" || evs[0].Data != "x😀y" || evs[1].Key != "\ufffd" {
		t.Fatalf("stored %+v", evs)
	}
	// A payload that is JSON other than a string is stored as its text,
	// escapes and all: the library's rule holds for that text.
	if evs[1].Data != `{"s":"\ud800"}` {
		t.Errorf("JSON payload stored as %q", evs[1].Data)
	}
}

// A byte order mark at the start of the input (an editor's "UTF-8 with
// BOM", PowerShell's Out-File) was refused as "invalid character 'ï'". It is
// refused still (a line is one JSON object, RFC 8259 forbids the mark in
// JSON text exchanged between systems), by name and with what to do.
func TestSendNamesTheByteOrderMark(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	for in, want := range map[string][]string{
		"\xef\xbb\xbf" + `{"key":"k"}` + "\n":                        {"line 1: ", "UTF-8 byte order mark (BOM", "without a BOM", "sed "},
		`{"key":"k"}` + "\n" + "\xef\xbb\xbf" + `{"key":"k"}` + "\n": {"line 2: ", "UTF-8 byte order mark (BOM"},
		"\xff\xfe{\x00\"\x00":                                        {"line 1: ", "UTF-16", "iconv"},
	} {
		r := h.runStdin(in, "send", "--queue", "q")
		h.expect(r, cli.ExitFailed, append(want, "nothing was sent"), []string{"send"})
		if strings.Contains(r.stderr, "invalid character") {
			t.Errorf("BOM reported as a character: %s", r.stderr)
		}
	}
	if evs := h.events("q"); len(evs) != 0 {
		t.Fatalf("refused inputs stored %+v", evs)
	}
}

// The flags of send meet the same rule as its JSON lines (the library's
// Message.Validate), surrogates encoded in UTF-8 included, as usage
// errors that name the field.
func TestSendFlagsFollowTheTextRule(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--key", "\xff"}, `invalid key "\xff"`},
		{[]string{"--key", "\xed\xa0\x80"}, `invalid key "\u{d800}": it contains U+D800`},
		{[]string{"--key", "k", "--type", "a\xed\xb0\x80b"}, `invalid type "a\u{dc00}b"`},
		{[]string{"--key", "k", "--payload", "\xfe"}, `invalid payload "\xfe"`},
		{[]string{"--key", "k", "--payload", "a\x00"}, `invalid payload "a\x00": it contains a NUL byte`},
	} {
		args := append([]string{"send", "--queue", "q"}, c.args...)
		h.fails(cli.ExitUsage, []string{c.want}, args...)
	}
	if evs := h.events("q"); len(evs) != 0 {
		t.Fatalf("refused sends stored %+v", evs)
	}
}

// send --dedup-id sends the one event once: a second send of the id says
// "duplicate of event N" (--json: "duplicate", "event_id") and stores
// nothing; --dedup-window gives the id its own window; bad ids, windows
// and combinations are usage errors naming the flag; another key under
// the id is refused naming both keys. key shows the hits (three: the
// second send and the two --json ones).
func TestSendOnceFromFlags(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	out := h.ok("send", "--queue", "q", "--key", "tenant-1", "--payload", "first", "--dedup-id", "req-1")
	if !strings.Contains(out, `sent 1 event to queue "q" (event id `) {
		t.Fatalf("first send printed %q", out)
	}
	first := h.events("q")[0].ID
	out = h.ok("send", "--queue", "q", "--key", "tenant-1", "--payload", "retry", "--dedup-id", "req-1")
	if want := fmt.Sprintf(`duplicate of event %d: not sent again (dedup id "req-1"`, first); !strings.Contains(out, want) {
		t.Errorf("second send printed %q, want %q", out, want)
	}
	var s sendOut
	h.json(&s, "send", "--queue", "q", "--key", "tenant-1", "--dedup-id", "req-1", "--dedup-window", "10m", "--json")
	if s.Sent != 0 || s.Duplicate == nil || !*s.Duplicate || s.EventID == nil || *s.EventID != first || s.FirstEventID != 0 {
		t.Errorf("send --json of a duplicate: %+v", s)
	}
	pinKeys(t, "send", h.raw("send", "--queue", "q", "--key", "tenant-1", "--dedup-id", "req-1"),
		"queue", "sent", "first_event_id", "last_event_id", "event_id", "duplicate")
	h.json(&s, "send", "--queue", "q", "--key", "tenant-1", "--dedup-id", "req-2", "--dedup-window", "10m", "--json")
	if s.Sent != 1 || s.Duplicate == nil || *s.Duplicate || s.EventID == nil || *s.EventID != s.FirstEventID {
		t.Errorf("send --json of a new id: %+v", s)
	}
	if evs := h.events("q"); len(evs) != 2 || evs[0].Data != "first" {
		t.Fatalf("stored %+v, want the first send and req-2", evs)
	}

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--key", "k", "--dedup-id", "a\x00b"}, []string{`invalid --dedup-id "a\x00b": it contains a NUL byte`}},
		{[]string{"--key", "k", "--dedup-id", "\xff"}, []string{`invalid --dedup-id "\xff": it is not valid UTF-8`}},
		{[]string{"--key", "k", "--dedup-id", strings.Repeat("d", 513)}, []string{"invalid --dedup-id", "513 bytes long, more than 512"}},
		{[]string{"--key", "k", "--dedup-window", "5m"}, []string{"invalid --dedup-window 5m0s: it is given without a dedup id"}},
		{[]string{"--key", "k", "--dedup-id", "x", "--dedup-window", "200h"}, []string{"invalid --dedup-window 200h0m0s", "7 days"}},
		{[]string{"--dedup-id", "x"}, []string{"missing --key: --dedup-id describes one event"}},
	} {
		h.fails(cli.ExitUsage, c.want, append([]string{"send", "--queue", "q"}, c.args...)...)
	}
	r := h.run("send", "--queue", "q", "--key", "tenant-2", "--dedup-id", "req-1")
	h.expect(r, cli.ExitFailed, []string{`dedup id "req-1" of queue "q" was sent with key "tenant-1"`, `not with key "tenant-2"`}, []string{"send"})
	if evs := h.events("q"); len(evs) != 2 {
		t.Fatalf("refused sends stored %+v", evs)
	}

	var k keyOut
	h.json(&k, "key", "--queue", "q", "--group", "g", "--key", "tenant-1", "--json")
	if k.Duplicates != 3 || len(k.DedupHits) != 1 || k.DedupHits[0].DedupID != "req-1" || k.DedupHits[0].EventID != first ||
		k.DedupHits[0].Hits != 3 || k.DedupWindowSeconds != 3600 {
		t.Errorf("key --json: %+v", k)
	}
	out = h.ok("key", "--queue", "q", "--group", "g", "--key", "tenant-1")
	for _, w := range []string{"duplicates refused: 3 (dedup window 1h0m0s), the most recent first (1 shown):", "DEDUP ID", "req-1"} {
		if !strings.Contains(out, w) {
			t.Errorf("key lacks %q:\n%s", w, out)
		}
	}
}

// JSON lines with "dedup_id" (and "dedup_window"): a duplicate line, in the
// input or of an earlier send, stores nothing and is listed by its line
// ("line N: duplicate of event M"; --json: "duplicates"); bad ids and
// windows are refused by line, naming the field as written, and nothing of
// the input is sent.
func TestSendOnceFromLines(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	h.ok("send", "--queue", "q", "--key", "a", "--payload", "earlier", "--dedup-id", "req-0")
	earlier := h.events("q")[0].ID
	in := strings.Join([]string{
		`{"key":"a","payload":"one","dedup_id":"req-1"}`,
		`{"key":"b","payload":"plain"}`,
		`{"key":"a","payload":"again","dedup_id":"req-1","dedup_window":"10m"}`,
		`{"dedup_id":"req-0","key":"a","payload":"retry of the earlier"}`,
		`{"key":"c","payload":"short","dedup_id":"req-2","dedup_window":"1500ms"}`,
		`{"key":"c","payload":"null window","dedup_id":"req-3","dedup_window":null}`,
	}, "\n") + "\n"
	r := h.runStdin(in, "send", "--queue", "q")
	if r.code != cli.ExitOK {
		t.Fatalf("send: %s", r)
	}
	evs := h.events("q")
	if len(evs) != 5 || evs[1].Data != "one" || evs[2].Data != "plain" || evs[3].Data != "short" || evs[4].Data != "null window" {
		t.Fatalf("stored %+v", evs)
	}
	for _, w := range []string{`sent 4 events to queue "q"`, "2 not sent again",
		fmt.Sprintf(`line 3: duplicate of event %d (dedup id "req-1")`, evs[1].ID),
		fmt.Sprintf(`line 4: duplicate of event %d (dedup id "req-0")`, earlier)} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("send printed\n%s\nwant %q", r.stdout, w)
		}
	}
	r = h.runStdin(in, "send", "--queue", "q", "--json")
	var s sendOut
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || r.code != cli.ExitOK {
		t.Fatalf("send --json: %s, %v", r, err)
	}
	pinKeys(t, "send (lines)", json.RawMessage(r.stdout), "queue", "sent", "first_event_id", "last_event_id", "duplicates")
	if s.Sent != 1 || len(s.Duplicates) != 5 || s.Duplicates[0].Line != 1 || s.Duplicates[0].EventID != evs[1].ID || s.Duplicates[4].DedupID != "req-3" {
		t.Errorf("send --json of the same input again: %+v (only line 2, without a dedup id, is new)", s)
	}

	before := len(h.events("q"))
	good := `{"key":"k","dedup_id":"fine"}` + "\n"
	for _, c := range []struct {
		line, want string
	}{
		{`{"key":"k","dedup_id":"a\u0000b"}`, `invalid "dedup_id" "a\x00b": it contains a NUL byte`},
		{`{"key":"k","dedup_id":"\ud800"}`, `invalid "dedup_id" "\u{d800}"`},
		{`{"key":"k","dedup_id":"` + strings.Repeat("d", 513) + `"}`, `invalid "dedup_id"`},
		{`{"key":"k","dedup_id":7}`, `field "dedup_id" must be a string`},
		{`{"key":"k","dedup_window":"5m"}`, `invalid "dedup_window" 5m0s: it is given without a dedup id, and only a dedup id has a window: give the message a "dedup_id" too`},
		{`{"key":"k","dedup_id":"x","dedup_window":"200h"}`, `invalid "dedup_window" 200h0m0s: a dedup window is from 1ms to 7 days`},
		{`{"key":"k","dedup_id":"x","dedup_window":"soon"}`, `field "dedup_window" is "soon", not a positive duration`},
		{`{"key":"k","dedup_id":"x","dedup_window":"-1m"}`, `not a positive duration`},
		{`{"key":"other","dedup_id":"fine"}`, `dedup id "fine" of queue "q" was sent with key "k" earlier in the same batch, not with key "other"`},
		{`{"key":"k","dedup_id":"req-0"}`, fmt.Sprintf(`dedup id "req-0" of queue "q" was sent with key "a" as event %d, not with key "k"`, earlier)},
	} {
		r := h.runStdin(good+c.line+"\n", "send", "--queue", "q")
		h.expect(r, cli.ExitFailed, []string{"standard input, line 2: ", c.want, "nothing was sent"}, []string{"send"})
	}
	if n := len(h.events("q")); n != before {
		t.Fatalf("refused inputs stored %d events", n-before)
	}
}

// send < /dev/null reads an empty input without telling a person to end it
// with Ctrl-D: /dev/null is a character device, not a terminal.
func TestSendFromDevNullSaysNoPrompt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var out, errb bytes.Buffer
	code := cli.Main(t.Context(), []string{"send", "--queue", "q"}, cli.Env{Stdin: null, Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return h.env[k] }})
	if code != cli.ExitOK || strings.Contains(errb.String(), "Ctrl-D") || !strings.Contains(out.String(), "sent 0 events") {
		t.Fatalf("send < /dev/null: exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
}

// docs/cli.md shows the error of a lone surrogate escape exactly as the
// command prints it (one way: \u{d800}, the rule of untrusted text).
func TestDocsShowTheSurrogateErrorAsPrinted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "partitionq: standard input, line 2: invalid key ") {
			doc = l
		}
	}
	r := h.runStdin(`{"key":"a"}`+"\n"+`{"key":"\ud800"}`+"\n", "send", "--queue", "q")
	if got := strings.TrimSuffix(r.stderr, "\n"); r.code != cli.ExitFailed || doc == "" || got != doc {
		t.Fatalf("docs/cli.md shows\n%s\nthe command prints (exit %d)\n%s", doc, r.code, got)
	}
}
