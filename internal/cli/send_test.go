package cli_test

import (
	"bytes"
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

// Finding 5 of issue 18: `{"key":"\xff"}`, `{"key":"\xfe"}` and
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
