package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/partitionq/partitionq/partitionq"
)

// maxLine bounds one line of send's input.
const maxLine = 64 << 20

// inputLine is one line of send's input, as the JSON of docs/cli.md.
type inputLine struct {
	Key     string
	Type    string
	Payload json.RawMessage
}

// decodeLine reads one JSON line into a message and validates it. The
// payload is stored as its JSON text, except that a JSON string is stored
// as the string itself; an absent or null payload is empty. Field names are
// exact ("key", "type", "payload"); an unknown or repeated field is an
// error, not a silent override.
func decodeLine(line []byte) (partitionq.Message, error) {
	in, err := decodeObject(line)
	if err != nil {
		return partitionq.Message{}, err
	}
	m := partitionq.Message{Key: in.Key, Type: in.Type}
	switch p := bytes.TrimSpace(in.Payload); {
	case len(p) == 0 || string(p) == "null":
	case p[0] == '"':
		var s string
		if err := json.Unmarshal(p, &s); err != nil {
			return partitionq.Message{}, fmt.Errorf("malformed JSON payload: %w", err)
		}
		m.Payload = []byte(s)
	default:
		m.Payload = bytes.Clone(p)
	}
	if err := m.Validate(); err != nil {
		return partitionq.Message{}, err
	}
	return m, nil
}

// decodeObject reads the one JSON object of a line, field by field.
func decodeObject(line []byte) (inputLine, error) {
	var in inputLine
	dec := json.NewDecoder(bytes.NewReader(line))
	malformed := func(err error) (inputLine, error) { return inputLine{}, fmt.Errorf("malformed JSON: %w", err) }
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
		if name != "key" && name != "type" && name != "payload" {
			return inputLine{}, fmt.Errorf(`malformed JSON: unknown field %s: the fields are "key", "type" and "payload"`, shortQuote(name))
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
		var v *string
		if err := json.Unmarshal(raw, &v); err != nil {
			return inputLine{}, fmt.Errorf("malformed JSON: field %q must be a string", name)
		}
		if v != nil {
			if name == "key" {
				in.Key = *v
			} else {
				in.Type = *v
			}
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

// shortQuote quotes a name from the input, shortened and escaped for an error message.
func shortQuote(s string) string {
	if r := []rune(s); len(r) > 40 {
		s = string(r[:40]) + "..."
	}
	return strconv.QuoteToASCII(s)
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
