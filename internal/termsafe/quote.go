package termsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// QuoteMax bounds the text between the quotes of Quote, in bytes.
const QuoteMax = 48

// Quote returns s quoted for an error message that echoes what a user
// gave (a flag value, a key, a field name): the one helper every such
// message uses, so no error repeats a 100 KB value or a terminal escape.
//
// The text is quoted as Go quotes strings, so control characters,
// invisible runes and bytes that are not UTF-8 appear as escapes (\x1b,
// \u202e, \xff); a surrogate code point encoded in UTF-8 (bytes ED A0 80 to
// ED BF BF: what an unpaired "\ud800" escape of JSON becomes when decoded
// without loss) appears as \ud800. When the quoted text would pass QuoteMax
// bytes it is cut at a character boundary and followed by "..." and the
// length of s: "tenant-tenant-..."... (100000 bytes).
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	n := 0
	for i := 0; i < len(s); {
		piece, size := quotePiece(s[i:])
		if n+len(piece) > QuoteMax {
			fmt.Fprintf(&b, `"... (%d bytes)`, len(s))
			return b.String()
		}
		b.WriteString(piece)
		n += len(piece)
		i += size
	}
	b.WriteByte('"')
	return b.String()
}

// quotePiece quotes the first character (or stray byte) of s, without the
// quotes, and returns how many bytes of s it took.
func quotePiece(s string) (string, int) {
	if r, ok := Surrogate(s); ok {
		return fmt.Sprintf(`\u%04x`, r), 3
	}
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size == 1 {
		return fmt.Sprintf(`\x%02x`, s[0]), 1
	}
	q := strconv.Quote(s[:size])
	return q[1 : len(q)-1], size
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
