package termsafe

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEcho(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	cases := map[string]string{
		"":                      `""`,
		"tenant-42":             `"tenant-42"`,
		"naïve 租户":              `"naïve 租户"`,
		"say \"hi\"\\":          `"say \"hi\"\\"`,
		"\x1b[2J":               `"\x1b[2J"`,
		"\u202eevil":            `"\u{202e}evil"`, // the rule of Line (termsafe.go)
		"a\xffb":                `"a\xffb"`,
		"\xed\xa0\x80":          `"\u{d800}"`, // a surrogate in UTF-8 bytes, as JSON's lone \ud800 decodes
		"a\xed\xb0\x80b":        `"a\u{dc00}b"`,
		"\xed\x9f\xbf":          "\"\ud7ff\"", // U+D7FF: a character like any other
		long:                    `"` + strings.Repeat("x", EchoMax) + `"... (100000 bytes)`,
		strings.Repeat("é", 30): `"` + strings.Repeat("é", EchoMax/2) + `"... (60 bytes)`,
		// An escape is never cut in half.
		strings.Repeat("\x1b", 20): `"` + strings.Repeat(`\x1b`, EchoMax/4) + `"... (20 bytes)`,
	}
	for in, want := range cases {
		if got := Echo(in); got != want {
			t.Errorf("Echo(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSurrogate(t *testing.T) {
	for in, want := range map[string]rune{"\xed\xa0\x80": 0xd800, "\xed\xaf\xbf": 0xdbff, "\xed\xb0\x80x": 0xdc00, "\xed\xbf\xbf": 0xdfff} {
		if r, ok := Surrogate(in); !ok || r != want {
			t.Errorf("Surrogate(%q) = %U, %v; want %U", in, r, ok, want)
		}
	}
	for _, in := range []string{"", "\xed", "\xed\xa0", "\xed\x9f\xbf", "\xee\x80\x80", "\xed\xc0\x80", "abc"} {
		if r, ok := Surrogate(in); ok {
			t.Errorf("Surrogate(%q) = %U, want none", in, r)
		}
	}
}

func FuzzEcho(f *testing.F) {
	for _, s := range []string{"", "a", "\x1b]0;x\a", "\xff", "\xed\xa0\x80", strings.Repeat("é", 100), strings.Repeat("\u0085", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Echo(s)
		// The quotes, EchoMax bytes, and `"... (N bytes)`.
		if len(q) > EchoMax+len(`""... (1000000000 bytes)`) {
			t.Fatalf("Echo(%q) is %d bytes long: %s", s, len(q), q)
		}
		if !utf8.ValidString(q) || strings.ContainsAny(q, "\x00\x1b\a\r\n\x7f\u0085\u202e") {
			t.Fatalf("Echo(%q) = %q holds what a terminal acts on", s, q)
		}
		if len(s) <= EchoMax/10 && strings.HasSuffix(q, "bytes)") {
			t.Fatalf("Echo(%q) = %s cuts a short value", s, q)
		}
	})
}

// A surrogate's bytes come back from Unescape as they were.
func TestSurrogateRoundTrip(t *testing.T) {
	for _, s := range []string{"\xed\xa0\x80", "a\xed\xb0\x80b", "tenant-\xed\xaf\xbf"} {
		if got := Unescape(Line(s)); got != s {
			t.Errorf("Unescape(Line(%q)) = %q", s, got)
		}
	}
}
