package termsafe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
)

func TestLine(t *testing.T) {
	cases := map[string]string{
		"tenant-42":           "tenant-42",
		"naïve 租户":            "naïve 租户",
		"\x1b[2J\x1b[31mred":  `\x1b[2J\x1b[31mred`,
		"\x1b]0;owned\x07":    `\x1b]0;owned\x07`,
		"a\\x1b":              `a\\x1b`,
		"bell\a cr\r del\x7f": `bell\x07 cr\r del\x7f`,
		"multi\nline\tkey":    `multi\nline\tkey`,
		"\u202eevil":          `\u{202e}evil`,
		"c1\u0085":            `c1\u{0085}`,
		"bad\xff\xfe":         `bad\xff\xfe`,
		"zero\u200bwidth":     `zero\u{200b}width`,
		"\ufeffbom":           `\u{feff}bom`,
		`say "hi"`:            `say "hi"`,
	}
	for in, want := range cases {
		if got := Line(in); got != want {
			t.Errorf("Line(%q) = %q, want %q", in, got, want)
		}
		if back := Unescape(Line(in)); back != in {
			t.Errorf("Unescape(Line(%q)) = %q", in, back)
		}
	}
}

func TestQuoteAndText(t *testing.T) {
	// Text is Line with its newlines as line breaks.
	for _, in := range []string{"a\nb\tc\x1b", "x\\n\ny", "plain"} {
		if got, want := strings.ReplaceAll(Text(in), "\n", `\n`), Line(in); got != want {
			t.Errorf("Text(%q) on one line = %q, Line = %q", in, got, want)
		}
	}
	if got, want := Quote("a\"b\nc"), `"a\"b\nc"`; got != want {
		t.Errorf("Quote = %s, want %s", got, want)
	}
	if got := Unescape(strings.Trim(Quote("a\"b\nc"), `"`)); got != "a\"b\nc" {
		t.Errorf("Unescape of Quote's inside = %q", got)
	}
	if got, want := Text("exit status 3:\n\tat main.go:12\n\x1b[31mred\n\n"), "exit status 3:\n\\tat main.go:12\n\\x1b[31mred"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

// JSON carries the exact values, and no character of the rule raw.
func TestJSON(t *testing.T) {
	in := map[string]string{"key": "k\x1b[2J\u202e\u0085\x7f\U000e0001é租", "plain": "tenant-42"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := JSON(b)
	for _, r := range string(out) {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Cf, r) {
			t.Fatalf("JSON keeps %U raw: %s", r, out)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["key"] != in["key"] || back["plain"] != in["plain"] {
		t.Fatalf("JSON decodes to %q (%v), want %q", back, err, in)
	}
	if !bytes.Contains(out, []byte(`\u202e`)) || !bytes.Contains(out, []byte(`\udb40\udc01`)) || !bytes.Contains(out, []byte("é租")) {
		t.Errorf("JSON = %s", out)
	}
	clean := []byte(`{"a":"tenant-42 租"}`)
	if got := JSON(clean); !bytes.Equal(got, clean) {
		t.Errorf("JSON changed clean text: %s", got)
	}
}

func TestClip(t *testing.T) {
	cases := []struct {
		in    string
		width int
		want  string
	}{
		{"tenant-42", 20, "tenant-42"},
		{"tenant-000123", 10, "ten…000123"},
		// The useful end of an error stays visible (the demo's "corrupt file"
		// was cut off at 120 columns).
		{"FileCreated /photos/img-0012.jpg: corrupt file: checksum mismatch", 40, "FileCrea…corrupt file: checksum mismatch"},
		{"write to storage node s3-eu-1: i/o timeout (attempt 2)", 30, "write to…timeout (attempt 2)"},
		// Never inside an escape.
		{Line("\x1b[2J\x1b[31mred key"), 12, `\x1b[2J…key`},
		// Wide characters count two cells.
		{"租户租户租户租户租户租户", 9, "租…户租户"},
		{"abcdef", 1, "…"},
		{"abcdef", 0, ""},
	}
	for _, c := range cases {
		got := Clip(c.in, c.width)
		if got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.in, c.width, got, c.want)
		}
		if w := ansi.StringWidth(got); w > c.width {
			t.Errorf("Clip(%q, %d) = %q is %d cells wide", c.in, c.width, got, w)
		}
	}
}

// A 100,000-character actor is clipped fast, keeping both of its ends.
func TestClipLong(t *testing.T) {
	long := "start-" + strings.Repeat("x", 100_000) + "-the-end"
	got := Clip(long, 30)
	if ansi.StringWidth(got) > 30 || !strings.HasPrefix(got, "start-") || !strings.HasSuffix(got, "-the-end") || !strings.Contains(got, "…") {
		t.Fatalf("Clip of a long text = %q", got)
	}
}

func FuzzLine(f *testing.F) {
	for _, s := range []string{"", "a", "\x1b[0m", `\x1b`, "\\", "\u202e", "\xff", `\u{41}`, "é\u0085", "a\nb\tc\r", `\n`, `"`} {
		f.Add(s, 7)
	}
	f.Fuzz(func(t *testing.T, s string, width int) {
		e := Line(s)
		if Unescape(e) != s {
			t.Fatalf("round trip of %q: %q -> %q", s, e, Unescape(e))
		}
		if !utf8.ValidString(e) {
			t.Fatalf("Line(%q) = %q is not UTF-8", s, e)
		}
		if strings.ContainsAny(e, "\x1b\x07\r\n\t\x00\x7f") {
			t.Fatalf("Line(%q) = %q keeps a control character", s, e)
		}
		width = width%200 + 1
		if width < 1 {
			width += 200
		}
		c := Clip(e, width)
		if w := ansi.StringWidth(c); w > width {
			t.Fatalf("Clip(%q, %d) = %q is %d cells", e, width, c, w)
		}
		if strings.ContainsAny(c, "\x1b\x07\r\n\x00") || !utf8.ValidString(c) {
			t.Fatalf("Clip(%q, %d) = %q is not safe", e, width, c)
		}
	})
}
