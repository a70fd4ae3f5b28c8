package termsafe

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	cases := map[string]string{
		"tenant-42":           "tenant-42",
		"naïve 租户":            "naïve 租户",
		"\x1b[2J\x1b[31mred":  `\x1b[2J\x1b[31mred`,
		"\x1b]0;owned\x07":    `\x1b]0;owned\x07`,
		"a\\x1b":              `a\\x1b`,
		"bell\a cr\r del\x7f": `bell\x07 cr\x0d del\x7f`,
		"line\nnext\ttab":     "line\nnext\ttab",
		"\u202eevil":          `\u{202e}evil`,
		"c1\u0085":            `c1\u{0085}`,
		"bad\xff\xfe":         `bad\xff\xfe`,
		"zero\u200bwidth":     `zero\u{200b}width`,
	}
	for in, want := range cases {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
		if back := Unescape(Escape(in)); back != in {
			t.Errorf("Unescape(Escape(%q)) = %q", in, back)
		}
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a", "\x1b[0m", `\x1b`, "\\", "\u202e", "\xff", `\u{41}`, "é\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := Escape(s)
		if Unescape(e) != s {
			t.Fatalf("round trip of %q: %q -> %q", s, e, Unescape(e))
		}
		if !utf8.ValidString(e) {
			t.Fatalf("Escape(%q) = %q is not UTF-8", s, e)
		}
		if strings.ContainsAny(e, "\x1b\x07\r\x00\x7f") {
			t.Fatalf("Escape(%q) = %q keeps a control character", s, e)
		}
	})
}
