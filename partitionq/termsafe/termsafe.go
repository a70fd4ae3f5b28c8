// Package termsafe is the one rule by which partitionq shows untrusted text
// (keys, event types, payloads, error texts, actors, reasons, worker
// names) in the CLI's tables and sentences, its JSON, and the console. A
// tenant's key such as "\x1b]52;c;..." must not reach the operator's
// terminal as it is: it could clear the screen, set the title or the
// clipboard, forge what a console shows, or split a table row in two.
//
// The rule, applied by Line (the text on one line: a table cell, a list
// row, a sentence):
//
//   - the backslash is written \\;
//   - newline, carriage return and tab are written \n, \r and \t;
//   - the other C0 control characters, DEL, and bytes that are not UTF-8
//     are written \xNN, except a UTF-16 surrogate code point encoded in
//     UTF-8 bytes (ED A0 80 to ED BF BF: what a lone "\ud800" escape of
//     JSON becomes when decoded without loss), written \u{d800};
//   - C1 control characters and invisible format characters (Unicode
//     category Cf: bidirectional overrides, zero-width characters, BOM)
//     are written \u{NNNN};
//   - everything else is written as it is.
//
// Line is injective: Unescape gives the original back, so the console can
// act on the key it showed. Quote is Line between double quotes, with the
// double quote written \" (for a key inside a sentence). Text is Line for a
// field shown whole on lines of its own (an error, a payload): the same,
// except that a newline starts a new line.
// JSON keeps every value exact and writes the same characters with JSON's
// own escapes (\u001b, \u202e), so that a program decodes the original and
// a terminal never receives them raw. Clip shortens a text for a column of
// a given width, with an ellipsis in the middle, so that both ends stay
// visible.
package termsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
)

// unsafeRune says whether the rule escapes r (decoded from valid UTF-8).
func unsafeRune(r rune) bool {
	return r == '\\' || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Cf, r)
}

func needsEscape(s string, quote bool) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || unsafeRune(r) || (quote && r == '"') {
			return true // (a surrogate's bytes are not UTF-8: the first case)
		}
		i += size
	}
	return false
}

// escape writes s by the rule; text keeps newlines as line breaks, quote
// escapes the double quote.
func escape(s string, text, quote bool) string {
	if !needsEscape(s, quote) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		if sr, ok := Surrogate(s[i:]); ok {
			fmt.Fprintf(&b, `\u{%04x}`, sr)
			i += 3
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '"' && quote:
			b.WriteString(`\"`)
		case r == '\n' && text:
			b.WriteByte('\n')
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case (r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, `\u{%04x}`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Line returns s on one line, escaped by the rule. Printable text is
// unchanged.
func Line(s string) string { return escape(s, false, false) }

// Quote returns s escaped by the rule, with the double quote written \",
// between double quotes: "tenant-42", "multi\nline".
func Quote(s string) string { return `"` + escape(s, false, true) + `"` }

// Text returns s escaped by the rule for showing whole, on lines of its
// own: exactly Line, except that a newline starts a new line (trailing
// newlines are dropped).
func Text(s string) string { return escape(strings.TrimRight(s, "\n"), true, false) }

// Unescape reverses Line (and the inside of Quote). Text that they cannot
// have produced is returned as it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch c := s[i+1]; c {
		case '\\', '"':
			b.WriteByte(c)
			i++
		case 'n':
			b.WriteByte('\n')
			i++
		case 'r':
			b.WriteByte('\r')
			i++
		case 't':
			b.WriteByte('\t')
			i++
		case 'x':
			if i+4 <= len(s) {
				if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
					b.WriteByte(byte(v))
					i += 3
					continue
				}
			}
			b.WriteByte(s[i])
		case 'u':
			if end := strings.IndexByte(s[i:], '}'); i+2 < len(s) && s[i+2] == '{' && end > 0 {
				if v, err := strconv.ParseUint(s[i+3:i+end], 16, 32); err == nil {
					if v >= 0xd800 && v <= 0xdfff { // a surrogate: its three bytes, as the input had them
						b.Write([]byte{0xed, byte(0x80 | (v>>6)&0x3f), byte(0x80 | v&0x3f)})
					} else {
						b.WriteRune(rune(v))
					}
					i += end
					continue
				}
			}
			b.WriteByte(s[i])
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// jsonEscapes says whether JSON writes r as an escape: encoding/json
// escapes the C0 controls itself; these are the rest of the rule's.
func jsonEscapes(r rune) bool {
	return r == 0x7f || (r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Cf, r)
}

// JSON rewrites encoded JSON (as encoding/json writes it) so that the
// characters the rule escapes never appear raw: DEL, C1 controls and
// invisible format characters become \uXXXX escapes (encoding/json already
// escapes the C0 controls). The JSON decodes to the same values. Outside
// strings JSON holds only ASCII, so the whole text can be rewritten.
func JSON(b []byte) []byte {
	i := 0
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		if jsonEscapes(r) {
			break
		}
		i += size
	}
	if i == len(b) {
		return b
	}
	out := append(make([]byte, 0, len(b)+16), b[:i]...)
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case !jsonEscapes(r):
			out = append(out, b[i:i+size]...)
		case r < 0x10000:
			out = fmt.Appendf(out, `\u%04x`, r)
		default: // beyond the BMP: a surrogate pair
			r -= 0x10000
			out = fmt.Appendf(out, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		}
		i += size
	}
	return out
}

// Clip shortens s, which Line has made safe, to at most width terminal
// cells. Text that fits is returned as it is; longer text keeps its start
// and its end around an ellipsis ("tenant-…00123"), cutting at a word
// boundary when one is near, never inside an escape such as \x1b nor
// inside a character. The end gets two thirds of the room: the end of a
// key tells keys apart, the end of an error is its cause.
func Clip(s string, width int) string {
	if width <= 0 {
		return ""
	}
	// Only the ends of a long text can be shown: read those alone, with a
	// gap between them that neither end can take.
	room := width - 1
	var us []unit
	if k := 64*width + 64; len(s) > 2*k {
		a, b := k, len(s)-k
		for a > 0 && !utf8.RuneStart(s[a]) {
			a--
		}
		for b < len(s) && !utf8.RuneStart(s[b]) {
			b++
		}
		us = append(append(units(s[:a]), unit{text: "", w: room + 1, sep: true}), units(s[b:])...)
	} else {
		if ansi.StringWidth(s) <= width {
			return s
		}
		us = units(s)
	}
	if width == 1 {
		return "…"
	}
	pre := make([]int, len(us)+1) // pre[i]: the width of us[:i]
	for i, u := range us {
		pre[i+1] = pre[i] + u.w
	}
	span := func(from, to int) int { return pre[to] - pre[from] }
	// The tail: as many units from the end as fit in two thirds of the
	// room. Cut inside a word, it takes the whole word when that costs at
	// most half of the head's room, else it starts after the word.
	tailRoom := room - room/3
	t := len(us)
	for t > 0 && span(t-1, len(us)) <= tailRoom {
		t--
	}
	if t > 0 && t < len(us) && !us[t-1].sep && !us[t].sep {
		start := t
		for start > 0 && !us[start-1].sep {
			start--
		}
		end := t
		for end < len(us)-1 && !us[end].sep {
			end++
		}
		switch {
		case start > 0 && span(start, t) <= (room-tailRoom)/2:
			t = start
		case end < len(us)-1:
			t = end + 1
		}
	}
	// The head: the room left, back to a word boundary in its last third.
	headRoom := room - span(t, len(us))
	h := 0
	for h < t && span(0, h+1) <= headRoom {
		h++
	}
	if h < t {
		for j := h - 1; j > 0 && span(j, h) <= headRoom/3; j-- {
			if us[j].sep {
				h = j
				break
			}
		}
	}
	// Room the head left goes back to the tail, in whole words.
	for j, left := t, headRoom-span(0, h); j > h && us[j-1].w <= left; {
		j--
		left -= us[j].w
		if us[j].sep || (j > 0 && us[j-1].sep) {
			t = j
		}
	}
	var head, tail strings.Builder
	for _, u := range us[:h] {
		head.WriteString(u.text)
	}
	for _, u := range us[t:] {
		tail.WriteString(u.text)
	}
	return strings.TrimRight(head.String(), " ") + "…" + strings.TrimLeft(tail.String(), " ,;:")
}

// unit is what Clip never cuts: an escape of the rule, or a character with
// the zero-width characters that follow it.
type unit struct {
	text string
	w    int
	sep  bool // a word boundary: a space, or punctuation that ends a phrase
}

func units(s string) []unit {
	var out []unit
	for i := 0; i < len(s); {
		n := escapeLen(s[i:])
		esc := n > 0
		if !esc {
			_, n = utf8.DecodeRuneInString(s[i:])
		}
		text := s[i : i+n]
		i += n
		w := ansi.StringWidth(text)
		if !esc && w == 0 && len(out) > 0 {
			out[len(out)-1].text += text // a combining mark stays with its base
			continue
		}
		out = append(out, unit{text: text, w: w, sep: !esc && len(text) == 1 && strings.ContainsAny(text, " :,;()[]{}=|")})
	}
	return out
}

// escapeLen is the length of the escape of the rule at the start of s, or 0.
func escapeLen(s string) int {
	if len(s) < 2 || s[0] != '\\' {
		return 0
	}
	switch s[1] {
	case '\\', '"', 'n', 'r', 't':
		return 2
	case 'x':
		if len(s) >= 4 {
			if _, err := strconv.ParseUint(s[2:4], 16, 8); err == nil {
				return 4
			}
		}
	case 'u':
		if len(s) > 3 && s[2] == '{' {
			if end := strings.IndexByte(s, '}'); end > 3 {
				return end + 1
			}
		}
	}
	return 0
}
