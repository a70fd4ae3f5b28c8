package cli

import (
	"encoding/json"

	"github.com/partitionq/partitionq/internal/termsafe"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// lockedWriter serializes writes from many goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newLockedWriter(w io.Writer) io.Writer {
	if lw, ok := w.(*lockedWriter); ok {
		return lw
	}
	return &lockedWriter{w: w}
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns. Cells are flattened to one line.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(headers) > 0 {
		t.row(headers...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(t.tw, "\t") //nolint:errcheck // reported by flush
		}
		io.WriteString(t.tw, oneLine(c)) //nolint:errcheck // reported by flush
	}
	io.WriteString(t.tw, "\n") //nolint:errcheck // reported by flush
}

func (t *table) flush() error { return t.tw.Flush() }

var lineFlattener = strings.NewReplacer("\r\n", " | ", "\n", " | ", "\r", " ", "\t", " ")

// oneLine flattens s to one line and escapes what a terminal could act on
// (keys, payloads and errors are untrusted: internal/termsafe).
func oneLine(s string) string {
	return termsafe.Escape(lineFlattener.Replace(strings.TrimRight(s, "\n")))
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	s = oneLine(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-3]) + "..."
}

// Times in tables are local, to the second; in JSON they are UTC RFC 3339.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func utc(t time.Time) time.Time { return t.UTC() }

// optTime is a time that is null in JSON when zero.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// indent indents a multi-line untrusted text (escaped: internal/termsafe).
func indent(s string) string {
	return "  " + strings.ReplaceAll(termsafe.Escape(strings.TrimRight(s, "\n")), "\n", "\n  ")
}
