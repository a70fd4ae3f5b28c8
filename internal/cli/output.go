package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/partitionq/partitionq/partitionq/termsafe"
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

// writeJSON writes v as indented JSON followed by a newline. Values are
// exact; the characters the escaping rule of partitionq/termsafe escapes are
// written as JSON escapes, never raw.
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(termsafe.JSON(b.Bytes()))
	return err
}

// cellMax is the widest a table cell gets unless its column says
// otherwise: a 100,000-character actor must not make a 100,000-character
// line.
const cellMax = 60

// table writes aligned columns. Every cell is untrusted text until shown:
// it is escaped by the rule of partitionq/termsafe (one line) and clipped to
// its column's width, keeping both ends.
type table struct {
	tw    *tabwriter.Writer
	heads []string
	max   map[int]int // by column; 0: no limit
}

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0), heads: headers, max: map[int]int{}}
	if len(headers) > 0 {
		t.row(headers...)
	}
	return t
}

// newFields is a table of "name:", value rows shown whole (dlq show):
// escaped, never clipped.
func newFields(w io.Writer) *table {
	return &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0), max: map[int]int{0: 0, 1: 0}}
}

// widths sets the widest cells of the columns named: 0 means no limit.
func (t *table) widths(byHeader map[string]int) *table {
	for i, h := range t.heads {
		if n, ok := byHeader[h]; ok {
			t.max[i] = n
		}
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(t.tw, "\t") // reported by flush
		}
		n, ok := t.max[i]
		if !ok {
			n = cellMax
		}
		c = termsafe.Line(c)
		if n > 0 {
			c = termsafe.Clip(c, n)
		}
		io.WriteString(t.tw, c) // reported by flush
	}
	io.WriteString(t.tw, "\n") // reported by flush
}

func (t *table) flush() error { return t.tw.Flush() }

// quote writes an untrusted text inside a sentence: escaped by the rule of
// partitionq/termsafe, between double quotes.
func quote(s string) string { return termsafe.Quote(s) }

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

// indent indents a multi-line untrusted text shown whole (escaped by the
// rule of partitionq/termsafe, its lines kept).
func indent(s string) string {
	return "  " + strings.ReplaceAll(termsafe.Text(s), "\n", "\n  ")
}
