package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// maxLine bounds one line of send's input.
const maxLine = 64 << 20

// inputLine is one line of send's input, as the JSON of docs/cli.md.
type inputLine struct {
	Key         string
	Type        string
	Payload     json.RawMessage
	DedupID     string
	DedupWindow time.Duration
}

// lineFields are the fields of a line, in the order docs/cli.md gives them.
var lineFields = []string{"key", "type", "payload", "dedup_id", "dedup_window"}

// decodeLine reads one JSON line into a message and validates it. The
// payload is stored as its JSON text, except that a JSON string is stored
// as the string itself; an absent or null payload is empty. Field names are
// exact ("key", "type", "payload"); an unknown or repeated field is an
// error, not a silent override.
//
// Strings are decoded without loss (unquote), and the message is then
// checked by the library's rule (Message.Validate), the one the flags of
// send meet too: invalid UTF-8 and unpaired surrogate escapes are refused
// by name, where encoding/json would store U+FFFD in their place.
func decodeLine(line []byte) (partitionq.Message, error) {
	if err := checkEncoding(line); err != nil {
		return partitionq.Message{}, err
	}
	in, err := decodeObject(line)
	if err != nil {
		return partitionq.Message{}, err
	}
	m := partitionq.Message{Key: in.Key, Type: in.Type, DedupID: in.DedupID, DedupWindow: in.DedupWindow}
	switch p := bytes.TrimSpace(in.Payload); {
	case len(p) == 0 || string(p) == "null":
	case p[0] == '"':
		s, ok := unquote(p)
		if !ok {
			return partitionq.Message{}, errors.New("malformed JSON payload: a string that does not end or holds an unknown escape")
		}
		m.Payload = []byte(s)
	default:
		m.Payload = bytes.Clone(p)
	}
	if err := m.Validate(); err != nil {
		return partitionq.Message{}, inLineWords(err)
	}
	return m, nil
}

// inLineWords tells a library *ValidationError of a dedup id or window in
// the words of a line: its field ("dedup_id", "dedup_window").
func inLineWords(err error) error {
	var ve *partitionq.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	field, ok := map[string]string{"dedup id": "dedup_id", "dedup window": "dedup_window"}[ve.Field]
	if !ok {
		return err
	}
	fix := ve.Fix
	if field == "dedup_window" {
		fix = strings.NewReplacer("a dedup id", `a "dedup_id"`, "or 0 for the queue's window", `or leave "dedup_window" out for the queue's window`).Replace(fix)
	}
	return explain(err, "invalid %q %s: %s: %s", field, ve.Value, ve.Problem, fix)
}

// Byte order marks, which a line of JSON must not start with.
var (
	bomUTF8    = []byte{0xef, 0xbb, 0xbf}
	bomUTF16LE = []byte{0xff, 0xfe}
	bomUTF16BE = []byte{0xfe, 0xff}
)

// checkEncoding refuses a line that starts with a byte order mark, naming
// it: JSON lines are UTF-8 without one (RFC 8259), and "invalid character
// 'ï'" would not say what is wrong.
func checkEncoding(line []byte) error {
	switch {
	case bytes.HasPrefix(line, bomUTF8):
		return errors.New("malformed JSON: the line starts with a UTF-8 byte order mark (BOM, the bytes EF BB BF), which JSON lines must not have: " +
			`save the input as UTF-8 without a BOM, or strip it (for example: sed '1s/^\xEF\xBB\xBF//')`)
	case bytes.HasPrefix(line, bomUTF16LE), bytes.HasPrefix(line, bomUTF16BE):
		return errors.New("malformed JSON: the line starts with a UTF-16 byte order mark: the input is UTF-16, and JSON lines are UTF-8: " +
			"convert it (for example: iconv -f UTF-16 -t UTF-8)")
	}
	return nil
}

// lineShape says what a line of send's standard input must be.
const lineShape = `each line must be one JSON object, such as {"key": "tenant-42", "type": "FileCreated", "payload": {"path": "/a"}}`

// malformedLine tells a JSON syntax error of a line with what a line must
// be: encoding/json says only "EOF" or "invalid character 'e' in literal
// true".
func malformedLine(err error) error {
	what := err.Error()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		what = "the line ends before its object does (a missing closing brace or quote?)"
	}
	return fmt.Errorf("malformed JSON: %s: %s", what, lineShape)
}

// decodeObject reads the one JSON object of a line, field by field.
func decodeObject(line []byte) (inputLine, error) {
	var in inputLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber() // a number's error would repeat it whole ("cannot unmarshal number 1000...")
	malformed := func(err error) (inputLine, error) { return inputLine{}, malformedLine(err) }
	if t, err := dec.Token(); err != nil {
		return malformed(err)
	} else if t != json.Delim('{') {
		return inputLine{}, errors.New(`malformed JSON: the line is not an object: write {"key": ..., "type": ..., "payload": ...}`)
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return malformed(err)
		}
		name, _ := t.(string)
		if !slices.Contains(lineFields, name) {
			return inputLine{}, fmt.Errorf(`malformed JSON: unknown field %s: the fields are "key", "type", "payload", "dedup_id" and "dedup_window"`, termsafe.Echo(name))
		}
		if seen[name] {
			return inputLine{}, fmt.Errorf("malformed JSON: field %q appears twice: give it once", name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return malformed(err)
		}
		if name == "payload" {
			in.Payload = raw
			continue
		}
		var v string
		switch raw := bytes.TrimSpace(raw); {
		case string(raw) == "null":
		case len(raw) > 0 && raw[0] == '"':
			var ok bool
			if v, ok = unquote(raw); !ok {
				return inputLine{}, fmt.Errorf("malformed JSON: field %q: a string that does not end or holds an unknown escape", name)
			}
		default:
			return inputLine{}, fmt.Errorf("malformed JSON: field %q must be a string", name)
		}
		switch name {
		case "key":
			in.Key = v
		case "type":
			in.Type = v
		case "dedup_id":
			in.DedupID = v
		case "dedup_window":
			if v == "" {
				break
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return inputLine{}, fmt.Errorf(`malformed JSON: field "dedup_window" is %s, not a positive duration: write one such as "10m" or "2h"`, termsafe.Quote(v))
			}
			in.DedupWindow = d
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return malformed(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return inputLine{}, errors.New("malformed JSON: more than one value on the line: put one JSON object on each line")
	}
	return in, nil
}

// unquote decodes a JSON string literal without loss, where encoding/json
// replaces invalid UTF-8 and each unpaired surrogate escape with U+FFFD
// (so "\xff", "\xfe" and "\ud800" would all become the one key "\ufffd").
// Bytes that are not UTF-8 are kept as they are, and an unpaired surrogate
// escape becomes its code point in UTF-8's form (ED A0 80 for \ud800), which
// the library's text rule then refuses, naming the field. A pair of
// escapes (\ud83d\ude00) is the one character it encodes. ok is false when
// lit is not a string literal; the caller's decoder has checked the syntax,
// so that is a bug, reported rather than hidden.
func unquote(lit []byte) (s string, ok bool) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", false
	}
	lit = lit[1 : len(lit)-1]
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit), true
	}
	b := make([]byte, 0, len(lit))
	for i := 0; i < len(lit); {
		c := lit[i]
		if c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		if i+1 >= len(lit) {
			return "", false
		}
		switch e := lit[i+1]; e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := hex4(lit[i+2:])
			if !ok {
				return "", false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if r < 0xdc00 && len(lit) >= i+6 && lit[i] == '\\' && lit[i+1] == 'u' {
					if r2, ok := hex4(lit[i+2:]); ok && r2 >= 0xdc00 && r2 <= 0xdfff {
						b = utf8.AppendRune(b, utf16.DecodeRune(r, r2))
						i += 6
						continue
					}
				}
				// utf8.AppendRune would write U+FFFD: encode the code point itself.
				b = append(b, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
				continue
			}
			b = utf8.AppendRune(b, r)
			continue
		default:
			return "", false
		}
		i += 2
	}
	return string(b), true
}

// hex4 reads the four hex digits of a \u escape.
func hex4(p []byte) (rune, bool) {
	if len(p) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// numberedLine is one non-blank input line, or the error that ended the input.
type numberedLine struct {
	n    int // line number, from 1
	text []byte
	err  error
}

// readLines feeds the non-blank lines of r to the returned channel until
// EOF, an error (sent as the last item) or ctx ends. A read blocked on a
// terminal does not hold up cancellation: the caller stops waiting.
func readLines(ctx context.Context, r io.Reader) <-chan numberedLine {
	ch := make(chan numberedLine)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), maxLine)
		n := 0
		for sc.Scan() {
			n++
			text := bytes.TrimSpace(sc.Bytes())
			if len(text) == 0 {
				continue
			}
			select {
			case ch <- numberedLine{n: n, text: bytes.Clone(text)}:
			case <-ctx.Done():
				return
			}
		}
		if err := sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				err = fmt.Errorf("the line is longer than %d MiB", maxLine>>20)
			}
			select {
			case ch <- numberedLine{n: n + 1, err: err}:
			case <-ctx.Done():
			}
		}
	}()
	return ch
}
