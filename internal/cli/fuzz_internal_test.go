package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/partitionq/partitionq/partitionq"
)

// maxLineErr bounds the error about one input line: it is printed on one
// line of standard error, so it must be short and printable whatever the
// input held.
const maxLineErr = 400

// FuzzDecodeLine feeds arbitrary bytes to the decoder of send's JSON lines.
// It never panics; an accepted line gives a valid message whose key, type
// and payload are what an independent decoding of the line says, which
// holds no U+FFFD the line did not write (encoding/json puts one in place
// of invalid UTF-8 and of unpaired surrogate escapes: such a line must be
// refused, not changed), and which comes back unchanged when encoded as a
// line again; a rejected line gives a short, printable error that says the
// JSON is malformed or which field is invalid. The seed corpus is in
// testdata/fuzz/FuzzDecodeLine.
func FuzzDecodeLine(f *testing.F) {
	for _, s := range []string{
		`{"key":"tenant-42","type":"FileCreated","payload":{"path":"/a"}}`,
		`{"key":"k","payload":"a string"}`,
		`{"key":"k","payload":null}`,
		`{"key":"k"}`,
		`{"key":""}`,
		`{"key":"k","payload":"\u0000"}`,
		`{"key":"\u0000"}`,
		`{"key":"k","extra":1}`,
		`{"key":"k"} {"key":"k2"}`,
		`[1,2]`,
		`{"key":"k","payload":[1, 2 ,3]}`,
		`{"key":"'; drop table pgq.queue; --","type":"$$","payload":"') or 1=1"}`,
		`{"key":"k","type":"T","payload":"\ud800"}`,
		"{\"key\":\"\xff\"}",
		`{"key":"k","payload":1e400}`,
		`{"KEY":"k"}`,
		"{\"key\":\"\xfe\"}",
		`{"key":"\ud800"}`,
		`{"key":"k","type":"a\udc00b"}`,
		`{"key":"k","payload":"a\udc00b"}`,
		`{"key":"\ud83d\ude00","payload":"\ufffd"}`,
		"\xef\xbb\xbf{\"key\":\"k\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := decodeLine(line)
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "malformed JSON") && !errors.Is(err, partitionq.ErrInvalid) {
				t.Fatalf("line %q: error %q is neither malformed JSON nor a validation error", line, msg)
			}
			if len(msg) > maxLineErr || !utf8.ValidString(msg) || strings.ContainsAny(msg, "\x00\x1b\r\n") {
				t.Fatalf("line %q: error is not short and printable (%d bytes): %q", line, len(msg), msg)
			}
			return
		}
		if verr := m.Validate(); verr != nil {
			t.Fatalf("line %q accepted as an invalid message: %v", line, verr)
		}
		if got, spelled := strings.Count(m.Key+m.Type+string(m.Payload), "\ufffd"), spelledFFFD(string(line)); got > spelled {
			t.Fatalf("line %q accepted as %q %q %q: %d U+FFFD where the line writes %d", line, m.Key, m.Type, m.Payload, got, spelled)
		}
		// A second decoding of the same line, with encoding/json's own
		// rules for field names (TestSendLineFieldNames pins the stricter
		// contract of docs/cli.md).
		var ref struct {
			Key     string          `json:"key"`
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(line, &ref); err != nil {
			t.Fatalf("line %q accepted, but it is not one JSON object: %v", line, err)
		}
		key, typ := ref.Key, ref.Type
		var payload []byte
		switch p := bytes.TrimSpace(ref.Payload); {
		case len(p) == 0 || string(p) == "null":
		case p[0] == '"':
			var s string
			if err := json.Unmarshal(p, &s); err != nil {
				t.Fatal(err)
			}
			payload = []byte(s)
		default:
			payload = p
		}
		if m.Key != key || m.Type != typ || !bytes.Equal(m.Payload, payload) {
			t.Fatalf("line %q decoded as %q %q %q, want %q %q %q", line, m.Key, m.Type, m.Payload, key, typ, payload)
		}
		again, err := json.Marshal(map[string]string{"key": m.Key, "type": m.Type, "payload": string(m.Payload)})
		if err != nil {
			t.Fatal(err)
		}
		m2, err := decodeLine(again)
		if err != nil || m2.Key != m.Key || m2.Type != m.Type || !bytes.Equal(m2.Payload, m.Payload) {
			t.Fatalf("line %q does not come back from %s: %+v, %v", line, again, m2, err)
		}
	})
}

// spelledFFFD counts the U+FFFD that a JSON text writes: as the character,
// or as a \ufffd escape (any case; a "\\ufffd", which is no escape, is
// counted too, which only makes the bound looser).
func spelledFFFD(s string) int {
	n := strings.Count(s, "\ufffd")
	for i := strings.Index(s, `\u`); i >= 0 && i+6 <= len(s); {
		if strings.EqualFold(s[i+2:i+6], "fffd") {
			n++
		}
		j := strings.Index(s[i+2:], `\u`)
		if j < 0 {
			break
		}
		i += 2 + j
	}
	return n
}

// The decoder of JSON strings keeps what encoding/json would change: bytes
// that are not UTF-8 stay, an unpaired surrogate escape becomes its code
// point in UTF-8's form (which Validate then refuses), a pair becomes its
// character, and every other escape means what JSON says.
func TestUnquoteKeepsWhatJSONWouldChange(t *testing.T) {
	cases := map[string]string{
		`""`:                   "",
		`"plain"`:              "plain",
		`"\"\\\/\b\f\n\r\t"`:   "\"\\/\b\f\n\r\t",
		`"\u0041\u00e9\u4e2d"`: "Aé中",
		`"\ud83d\ude00"`:       "\U0001F600",
		`"\uD83D\uDE00"`:       "\U0001F600",
		`"\ud800"`:             "\xed\xa0\x80",
		`"a\udc00b"`:           "a\xed\xb0\x80b",
		`"\ud800\ud800"`:       "\xed\xa0\x80\xed\xa0\x80",
		`"\udc00\ud800"`:       "\xed\xb0\x80\xed\xa0\x80",
		`"\ud800\u0041"`:       "\xed\xa0\x80A",
		`"\ud800x"`:            "\xed\xa0\x80x",
		`"\ufffd"`:             "\ufffd",
		"\"\xff\xfe\"":         "\xff\xfe",
		"\"\xed\xa0\x80\"":     "\xed\xa0\x80",
		`"\u0000"`:             "\x00",
	}
	for lit, want := range cases {
		got, ok := unquote([]byte(lit))
		if !ok || got != want {
			t.Errorf("unquote(%s) = %q, %v; want %q", lit, got, ok, want)
		}
		// What encoding/json agrees with, where the text is valid.
		var ref string
		if utf8.ValidString(want) {
			if err := json.Unmarshal([]byte(lit), &ref); err != nil || ref != want {
				t.Errorf("encoding/json decodes %s as %q (%v), unquote as %q", lit, ref, err, want)
			}
		}
	}
	for _, lit := range []string{``, `"`, `x`, `"abc`, `"\"`, `"\q"`, `"\u12"`, `"\u12g4"`} {
		if got, ok := unquote([]byte(lit)); ok {
			t.Errorf("unquote(%s) = %q, want not ok", lit, got)
		}
	}
}

// docs/cli.md: the fields of a line are "key", "type" and "payload"; "any
// other field is an error (a typo such as "payloud" would otherwise drop the
// payload silently)". encoding/json matches field names without regard to
// case and lets a repeated name override the earlier one, so a line can say
// two things at once; the command must refuse such a line rather than pick
// one.
func TestSendLineFieldNames(t *testing.T) {
	for _, line := range []string{
		`{"KEY":"k"}`,
		`{"key":"k","Payload":"p"}`,
		`{"key":"a","Key":"b"}`,
		`{"key":"a","key":"b"}`,
		`{"key":"k","payload":"p","payload":"q"}`,
	} {
		if m, err := decodeLine([]byte(line)); err == nil {
			t.Errorf("line %s accepted as key %q payload %q: want an error naming the field", line, m.Key, m.Payload)
		}
	}
}

// An error about a line is printed on one line of standard error: it quotes
// at most a short prefix of what the line held, as the library's validation
// errors do. An unknown field name is quoted in full today, however long.
func TestSendLineErrorsAreShort(t *testing.T) {
	for _, line := range []string{
		`{"` + strings.Repeat("x", 5000) + `":1}`,
		`{"key":"k","` + strings.Repeat("\\u001b", 2000) + `":1}`,
	} {
		_, err := decodeLine([]byte(line))
		if err == nil {
			t.Fatalf("line of %d bytes accepted", len(line))
		}
		if msg := err.Error(); len(msg) > maxLineErr {
			t.Errorf("the error about a line of %d bytes is %d bytes long: %.120s...", len(line), len(msg), msg)
		}
	}
}
