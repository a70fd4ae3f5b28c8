package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/partitionq/partitionq/partitionq"
)

// The preview's table lines up: the header's columns start where each row's
// do, whatever the widths of the ids, types and payloads (multi-byte text
// included), and the sentence above it names the key once.
func TestPreviewColumnsLineUp(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	evs := []partitionq.PreviewEvent{
		{ID: 7, Type: "FileCreated", Time: at, Head: true, Payload: []byte(`{"path":"/a"}`)},
		{ID: 123456789, Type: "Fïlé", Time: at, Payload: []byte(`{"path":"/ünïcode/päth"}`)},
		{ID: 42, Type: "", Time: at, Payload: []byte(`x`)},
	}
	var b bytes.Buffer
	if err := printPreview(&b, "tenant-7", partitionq.KeyBlocked, evs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 2+len(evs) {
		t.Fatalf("preview printed %d lines, want a sentence, a header and %d rows:\n%s", len(lines), len(evs), b.String())
	}
	if !strings.HasPrefix(lines[0], `key "tenant-7" runs next`) {
		t.Errorf("sentence = %q", lines[0])
	}
	header := lines[1]
	for _, col := range []string{"EVENT", "TYPE", "SENT", "WHAT", "PAYLOAD"} {
		i := strings.Index(header, col)
		if i < 0 {
			t.Fatalf("header %q has no %s", header, col)
		}
		want := utf8.RuneCountInString(header[:i])
		for _, row := range lines[2:] {
			// the cell before this column ends with two spaces at least, and
			// this column's cell starts at the header's column
			runes := []rune(row)
			if len(runes) <= want || runes[want-1] != ' ' || runes[want-2] != ' ' || runes[want] == ' ' {
				t.Errorf("column %s starts at %d in the header but not in row %q\n%s", col, want, row, b.String())
			}
		}
	}
}
