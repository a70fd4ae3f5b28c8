package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

func TestParseSlots(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"all", []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"", []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"3", []int{3}},
		{"0,2,3", []int{0, 2, 3}},
		{"5-7, 0 ,6", []int{0, 5, 6, 7}},
	} {
		got, err := parseSlots(c.in, 8)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parseSlots(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"8", "-1", "a", "3-1", "1,,2", "0-9", "1-"} {
		if _, err := parseSlots(in, 8); exitCode(err) != ExitUsage {
			t.Errorf("parseSlots(%q): want a usage error, got %v", in, err)
		}
	}
}

func TestParseBefore(t *testing.T) {
	now := time.Date(2024, 5, 10, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2024-05-01T10:00:00Z": time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC),
		"2024-05-01":           time.Date(2024, 5, 1, 0, 0, 0, 0, time.Local),
		"2024-05-01 08:30:00":  time.Date(2024, 5, 1, 8, 30, 0, 0, time.Local),
		"72h":                  now.Add(-72 * time.Hour),
		"":                     {},
	} {
		got, err := parseBefore(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseBefore(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"yesterday", "-5h", "2024-13-01"} {
		if _, err := parseBefore(in, now); exitCode(err) != ExitUsage {
			t.Errorf("parseBefore(%q): want a usage error, got %v", in, err)
		}
	}
}

func TestDecodeLine(t *testing.T) {
	for in, want := range map[string]partitionq.Message{
		`{"key":"k","type":"T","payload":{"a": [1, 2]}}`: {Key: "k", Type: "T", Payload: []byte(`{"a": [1, 2]}`)},
		`{"key":"k","payload":"text \"quoted\" \u00e9"}`: {Key: "k", Payload: []byte(`text "quoted" é`)},
		`{"key":"k","payload":null}`:                     {Key: "k"},
		`{"key":"k"}`:                                    {Key: "k"},
		`{"key":"k","payload":false}`:                    {Key: "k", Payload: []byte("false")},
	} {
		got, err := decodeLine([]byte(in))
		if err != nil || got.Key != want.Key || got.Type != want.Type || string(got.Payload) != string(want.Payload) {
			t.Errorf("decodeLine(%s) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		`{"key":"k"`:                   "malformed JSON",
		`{"key":"k"} 1`:                "more than one value",
		`{"key":""}`:                   "invalid key",
		`{"key":"k","extra":1}`:        `unknown field "extra"`,
		`"just a string"`:              "malformed JSON",
		`{"key":"k","type":"a\u0000"}`: "NUL byte",
	} {
		if _, err := decodeLine([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("decodeLine(%s) error %v, want one mentioning %q", in, err, want)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	var tb tailBuffer
	for range 30 {
		tb.Write([]byte(strings.Repeat("x", 10) + "\n")) // never fails
	}
	if n := strings.Count(tb.String(), "\n"); n != stderrTailLines-1 {
		t.Errorf("kept %d lines, want %d", n+1, stderrTailLines)
	}
	var big tailBuffer
	big.Write([]byte("first line\n" + strings.Repeat("é", 3000) + "\x00\xff")) // never fails
	s := big.String()
	if len(s) > stderrTailBytes || strings.Contains(s, "first line") || strings.ContainsRune(s, 0) || !strings.HasSuffix(s, "é") {
		t.Errorf("tail of a long line: %d bytes, %q...", len(s), s[:20])
	}
	var empty tailBuffer
	if empty.String() != "" {
		t.Error("empty tail is not empty")
	}
}

// The demo's closing hints name its database in the user's own connection
// string, password hidden, quoted for the shell when it must be.
func TestDemoHintDB(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://postgres@localhost:5432/postgres":                   "postgres://postgres@localhost:5432/partitionq_demo",
		"postgres://app:s3cret@127.0.0.1:5432/postgres?sslmode=disable": "'postgres://app:xxxxx@127.0.0.1:5432/partitionq_demo?sslmode=disable'",
		"host=localhost user=postgres dbname=postgres":                  "'host=localhost user=postgres dbname=partitionq_demo'",
		`host=localhost password='it\'s' dbname=postgres`:               "'host=localhost password=xxxxx dbname=partitionq_demo'",
	} {
		if got := demoHintDB(in, "partitionq_demo"); got != want {
			t.Errorf("demoHintDB(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestExitCode(t *testing.T) {
	inv := &partitionq.ValidationError{Field: "key"}
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{usagef("x"), ExitUsage},
		{errors.New("made by cobra"), ExitUsage},
		{&opError{err: errors.New("db down")}, ExitFailed},
		{&inputError{Line: 3, Err: inv}, ExitFailed},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	// runE: the library's invalid arguments are usage errors, except in input.
	for _, c := range []struct {
		err  error
		want int
	}{
		{inv, ExitUsage},
		{partitionq.ErrNoSuchQueue, ExitFailed},
		{&inputError{Line: 1, Err: inv}, ExitFailed},
		{usagef("y"), ExitUsage},
	} {
		err := runE(func(*cobra.Command, []string) error { return c.err })(nil, nil)
		if got := exitCode(err); got != c.want {
			t.Errorf("runE(%v): exit %d, want %d", c.err, got, c.want)
		}
	}
}

// A line that is not JSON says what is wrong and what a line must be, not
// only encoding/json's "EOF" or "invalid character".
func TestMalformedLineSaysWhatALineIs(t *testing.T) {
	shape := `: each line must be one JSON object, such as {"key": "tenant-42", "type": "FileCreated", "payload": {"path": "/a"}}`
	for in, want := range map[string]string{
		`{"key":"k"`:                 "malformed JSON: the line ends before its object does (a missing closing brace or quote?)" + shape,
		`{"key":"k","payload":`:      "malformed JSON: the line ends before its object does (a missing closing brace or quote?)" + shape,
		`{"key":"k","payload":tree}`: "malformed JSON: invalid character 'e' in literal true (expecting 'u')" + shape,
		`key=k`:                      "malformed JSON: invalid character 'k' looking for beginning of value" + shape,
	} {
		_, err := decodeLine([]byte(in))
		if err == nil || err.Error() != want {
			t.Errorf("decodeLine(%s):\n got %v\nwant %s", in, err, want)
		}
	}
}
