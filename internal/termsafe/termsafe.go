// Package termsafe makes untrusted text (keys, types, payloads, error
// texts, reasons) safe to show on a terminal. A tenant's key such as
// "\x1b]52;c;..." must not reach the operator's terminal as it is: it could
// clear the screen, set the title or the clipboard, or forge what a
// console shows. Escape is injective, so Unescape gives the original back
// (the console acts on the key it showed).
package termsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s with every byte or rune a terminal could act on
// written as an escape: C0 control characters (but newline and tab), DEL
// and bytes that are not UTF-8 as \xNN; C1 control characters and
// invisible format characters (bidirectional overrides, zero-width ones)
// as \u{NNNN}; the backslash itself as \\. Printable text is unchanged.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n' || r == '\t':
			b.WriteRune(r)
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

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\\' || (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f ||
			(r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Cf, r) {
			return true
		}
		i += size
	}
	return false
}

// Unescape reverses Escape. Text that Escape cannot have produced is
// returned as it is.
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
		switch s[i+1] {
		case '\\':
			b.WriteByte('\\')
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
					b.WriteRune(rune(v))
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
