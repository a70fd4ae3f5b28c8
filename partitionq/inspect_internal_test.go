package partitionq

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDocsStateTheBounds: the bounds of the reads (Status's budgets here,
// HotKeys's, Key's) and of an operator action's wait are unexported; the
// docs give them in words, and say what the code has. (The CLI's help
// says what docs/cli.md says: internal/cli's TestHelpGivesTheDocsBounds.)
func TestDocsStateTheBounds(t *testing.T) {
	n := func(v int) string { // 200000 -> "200,000"
		s := strconv.Itoa(v)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	for file, phrases := range map[string][]string{
		"operations.md": {
			fmt.Sprintf("what is left, at most %s events a call", n(censusBudget)),
			fmt.Sprintf("**at most %s events**", n(backlogBudget)),
			fmt.Sprintf("Up to %s pending events in the group every one is counted", n(hotKeysExactMax)),
			fmt.Sprintf("sampled (about %s events, by page)", n(hotKeysSample)),
		},
		"cli.md": {
			fmt.Sprintf("first %s events after the slots' positions", n(hotKeysWindow)),
			fmt.Sprintf("up to %s pending events in the group every one is counted", n(hotKeysExactMax)),
			fmt.Sprintf("about %s events are sampled", n(hotKeysSample)),
			fmt.Sprintf("Up to %d of each are listed", keyEventsLimit),
		},
		"guarantees.md": {
			fmt.Sprintf("the action waits for the outcome, up to %d s, then fails with `ErrHeadBusy`", operatorLockTimeout/time.Second),
		},
	} {
		b, err := os.ReadFile(filepath.Join("..", "docs", file))
		if err != nil {
			t.Fatal(err)
		}
		doc := strings.Join(strings.Fields(string(b)), " ")
		for _, p := range phrases {
			if !strings.Contains(doc, p) {
				t.Errorf("docs/%s does not say %q", file, p)
			}
		}
	}
}
