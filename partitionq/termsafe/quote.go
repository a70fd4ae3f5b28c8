package termsafe

import (
	"fmt"
	"strings"
)

// EchoMax bounds the text between the quotes of Echo, in bytes.
const EchoMax = 48

// Echo returns s for an error message that echoes what a user gave (a flag
// value, a key, a field name): Quote's rule, cut after EchoMax bytes at the
// end of a character or escape and followed by "..." and the length of s
// ("tenant-tenant-..."... (100000 bytes)). Every such message uses it, so no
// error repeats a 100 KB value or reaches a terminal with an escape.
func Echo(s string) string {
	q := escape(s, false, true)
	if len(q) <= EchoMax {
		return `"` + q + `"`
	}
	var b strings.Builder
	b.WriteByte('"')
	n := 0
	for _, u := range units(q) {
		if n+len(u.text) > EchoMax {
			break
		}
		b.WriteString(u.text)
		n += len(u.text)
	}
	fmt.Fprintf(&b, `"... (%d bytes)`, len(s))
	return b.String()
}

// Surrogate reports whether s starts with a UTF-16 surrogate code point
// (U+D800 to U+DFFF) encoded as UTF-8 bytes, which UTF-8 forbids, and
// returns it.
func Surrogate(s string) (rune, bool) {
	if len(s) < 3 || s[0] != 0xed || s[1] < 0xa0 || s[1] > 0xbf || s[2] < 0x80 || s[2] > 0xbf {
		return 0, false
	}
	return 0xd000 | rune(s[1]&0x3f)<<6 | rune(s[2]&0x3f), true
}
