package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/partitionq/partitionq/partitionq"
)

// maxLine bounds one line of send's input.
const maxLine = 64 << 20

// inputLine is one line of send's input, as the JSON of docs/cli.md.
type inputLine struct {
	Key     string          `json:"key"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// decodeLine reads one JSON line into a message and validates it. The
// payload is stored as its JSON text, except that a JSON string is stored
// as the string itself; an absent or null payload is empty.
func decodeLine(line []byte) (partitionq.Message, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var in inputLine
	if err := dec.Decode(&in); err != nil {
		return partitionq.Message{}, fmt.Errorf("malformed JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return partitionq.Message{}, errors.New("malformed JSON: more than one value on the line: put one JSON object on each line")
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
