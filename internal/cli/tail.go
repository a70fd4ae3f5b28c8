package cli

import (
	"strings"
)

// Limits of the standard error a failed handler leaves as its error text.
const (
	stderrTailBytes = 4 << 10
	stderrTailLines = 20
)

// tailBuffer keeps the end of what is written to it. It is not safe for
// concurrent use: one handler process writes to one buffer.
type tailBuffer struct {
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*stderrTailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrTailBytes:]...)
	}
	return len(p), nil
}

// String returns the last stderrTailLines lines within the last
// stderrTailBytes bytes, as text PostgreSQL can store: valid UTF-8 without
// NUL bytes.
func (t *tailBuffer) String() string {
	b := t.buf
	if len(b) > stderrTailBytes {
		b = b[len(b)-stderrTailBytes:]
	}
	s := strings.ToValidUTF8(string(b), "")
	s = strings.ReplaceAll(s, "\x00", "")
	s = strings.TrimRight(s, "\r\n\t ")
	lines := strings.Split(s, "\n")
	if len(lines) > stderrTailLines {
		lines = lines[len(lines)-stderrTailLines:]
	}
	return strings.TrimLeft(strings.Join(lines, "\n"), "\r\n")
}
