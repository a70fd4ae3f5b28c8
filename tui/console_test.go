package tui

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/charmbracelet/x/term"
	"github.com/partitionq/partitionq/partitionq"
)

// Without a terminal Run says so; it failed with "error creating
// cancelreader ... epoll".
func TestRunNeedsATerminal(t *testing.T) {
	t.Parallel()
	if term.IsTerminal(os.Stdin.Fd()) && term.IsTerminal(os.Stdout.Fd()) {
		t.Skip("the test runs in a terminal")
	}
	err := Run(t.Context(), &partitionq.Client{}, Options{Queue: "files", Group: "indexer"})
	if !errors.Is(err, ErrNoTerminal) || !strings.Contains(err.Error(), "must be a terminal") {
		t.Fatalf("Run without a terminal: %v", err)
	}
}
