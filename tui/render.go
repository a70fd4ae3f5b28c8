package tui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
)

// Formatting helpers shared by the views. They are pure: the same input
// renders the same text.

// age formats a duration the way an operator reads it at a glance:
// "0s", "42s", "4m12s", "3h05m", "2d04h".
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", int(d/time.Millisecond))
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", float64(d/(100*time.Millisecond))/10)
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// count formats a count in at most 5 characters: 999, 1.2k, 12k, 1.2M.
func count(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d", n)
	case n < 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	case n < 1_000_000:
		return fmt.Sprintf("%dk", n/1000)
	case n < 10_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%dM", n/1_000_000)
}

// rate formats events per second.
func rate(r float64) string {
	switch {
	case r <= 0:
		return "0"
	case r < 10:
		return fmt.Sprintf("%.1f", r)
	}
	return count(int64(math.Round(r)))
}

var sparkRunes = []rune("▁▂▃▄▅▆▇█")

// sparkline draws the last width samples. A negative sample means "no
// batch in that interval" and draws a blank; a zero sample with activity
// draws the lowest bar.
func sparkline(samples []float64, width int) string {
	if width <= 0 {
		return ""
	}
	if len(samples) > width {
		samples = samples[len(samples)-width:]
	}
	hi := 0.0
	for _, s := range samples {
		hi = math.Max(hi, s)
	}
	var b strings.Builder
	b.WriteString(strings.Repeat(" ", width-len(samples)))
	for _, s := range samples {
		switch {
		case s < 0:
			b.WriteRune(' ')
		case hi <= 0:
			b.WriteRune(sparkRunes[0])
		default:
			i := int(math.Round(s / hi * float64(len(sparkRunes)-1)))
			b.WriteRune(sparkRunes[max(0, min(i, len(sparkRunes)-1))])
		}
	}
	return b.String()
}

// fit pads or truncates s (which may hold ANSI styles) to exactly width
// cells; truncation ends in "…".
func fit(s string, width int) string {
	if width <= 0 {
		return ""
	}
	w := ansi.StringWidth(s)
	if w > width {
		return ansi.Truncate(s, width, "…")
	}
	return s + strings.Repeat(" ", width-w)
}

// fitRight is fit with the text aligned right.
func fitRight(s string, width int) string {
	w := ansi.StringWidth(s)
	if w > width {
		return ansi.Truncate(s, width, "…")
	}
	return strings.Repeat(" ", width-w) + s
}

// column is one column of a table.
type column struct {
	title string
	width int
	right bool
	max   int // the widest flex makes it (0: no limit)
}

// row renders cells (plain text, made safe by line) in columns separated
// by one space. A cell too long for its column is clipped in the middle,
// so that its end stays visible: the end of an error is its cause, the end
// of a key tells it from its neighbours.
func row(cols []column, cells ...string) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		cell := ""
		if i < len(cells) {
			cell = clip(cells[i], c.width)
		}
		if c.right {
			b.WriteString(fitRight(cell, c.width))
		} else {
			b.WriteString(fit(cell, c.width))
		}
	}
	return b.String()
}

// headerRow renders the titles of cols.
func headerRow(cols []column) string {
	titles := make([]string, len(cols))
	for i, c := range cols {
		titles[i] = c.title
	}
	return row(cols, titles...)
}

// flex gives the room left in width to the columns marked by grow, in
// proportion to their weights, up to each column's max; what a column at
// its max cannot take goes to the last column marked that has no max.
func flex(width int, cols []column, grow map[int]int) []column {
	used := len(cols) - 1
	for _, c := range cols {
		used += c.width
	}
	left := width - used
	if left <= 0 {
		return cols
	}
	total := 0
	for _, w := range grow {
		total += w
	}
	given := 0
	last, rest := -1, -1
	for i := range cols {
		if w, ok := grow[i]; ok {
			add := left * w / total
			if m := cols[i].max; m > 0 {
				add = min(add, max(0, m-cols[i].width))
			} else {
				rest = i
			}
			cols[i].width += add
			given += add
			last = i
		}
	}
	if rest < 0 {
		rest = last
	}
	if rest >= 0 {
		cols[rest].width += left - given
	}
	return cols
}

// contentWidth is the width of the widest of vals (texts made safe), at
// least lo and at most hi: a column as wide as what it shows.
func contentWidth(lo, hi int, vals ...string) int {
	w := lo
	for _, v := range vals {
		w = max(w, min(hi, lipglossWidth(v)))
	}
	return w
}

// window returns the range [from, to) of n rows to show in height rows so
// that cursor is visible, keeping the previous offset when it can.
func window(n, height, cursor, offset int) (from, to int) {
	if height <= 0 || n == 0 {
		return 0, 0
	}
	if cursor < offset {
		offset = cursor
	}
	if cursor >= offset+height {
		offset = cursor - height + 1
	}
	offset = max(0, min(offset, n-height))
	return offset, min(n, offset+height)
}

// prettyPayload renders an untrusted payload whole, made safe: indented
// JSON when it is JSON, else the text (not valid UTF-8: a note).
func prettyPayload(p []byte) string {
	if len(p) == 0 {
		return "(empty payload)"
	}
	if json.Valid(p) {
		var b bytes.Buffer
		if err := json.Indent(&b, p, "", "  "); err == nil {
			return text(b.String())
		}
	}
	if !utf8.Valid(p) {
		return fmt.Sprintf("(%d bytes, not UTF-8)", len(p))
	}
	return text(string(p))
}

// compactPayload renders an untrusted payload on one line, made safe:
// compact JSON when it is JSON.
func compactPayload(p []byte) string {
	if json.Valid(p) {
		var b bytes.Buffer
		if err := json.Compact(&b, p); err == nil {
			return line(b.String())
		}
	}
	return line(string(p))
}

// errorBlock shows an untrusted error whole, made safe: its lines kept,
// each wrapped to width.
func errorBlock(st styles, e string, width int) []string {
	if e == "" {
		return []string{st.warn.Render("Error: (no error recorded)")}
	}
	var out []string
	for i, l := range lines(text(e)) {
		if i == 0 {
			l = "Error: " + l
		}
		for _, w := range wrap(l, width) {
			out = append(out, st.warn.Render(w))
		}
	}
	return out
}

// wrap wraps text to width cells (words longer than width are cut).
func wrap(s string, width int) []string {
	if width <= 0 {
		return nil
	}
	return strings.Split(ansi.Wrap(s, width, ""), "\n")
}

// padLines makes text exactly height lines, each exactly width cells: the
// views always fill their area, so nothing of the previous frame shows. An
// element holding several lines counts as several.
func padLines(in []string, width, height int) string {
	var lines []string
	for _, l := range in {
		lines = append(lines, strings.Split(l, "\n")...)
	}
	if len(lines) > height {
		lines = lines[:height]
	}
	out := make([]string, height)
	for i := range out {
		if i < len(lines) {
			out[i] = fit(lines[i], width)
		} else {
			out[i] = strings.Repeat(" ", width)
		}
	}
	return strings.Join(out, "\n")
}

// splitLines splits a rendered block into lines.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// clock formats a wall-clock time for a header or a detail.
func clock(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.Format("15:04:05")
}

// stamp formats a time with its date.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.Format("2006-01-02 15:04:05")
}

func lipglossWidth(s string) int { return lipgloss.Width(s) }
