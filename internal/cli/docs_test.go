package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docs/cli.md and --help stay in step: every command and flag is in the
// page, and every flag the page names exists.
func TestDocsCoverEveryCommandAndFlag(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	root := newRoot(Env{}.withDefaults())
	known := map[string]bool{"help": true, "version": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if c.HasParent() && !strings.Contains(doc, "`"+c.CommandPath()) {
			t.Errorf("docs/cli.md does not document `%s`", c.CommandPath())
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			known[f.Name] = true
			if f.Name != "help" && !strings.Contains(doc, "`--"+f.Name) {
				t.Errorf("docs/cli.md does not document %s --%s", c.CommandPath(), f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, m := range regexp.MustCompile("`--([a-z][a-z-]*)").FindAllStringSubmatch(doc, -1) {
		if !known[m[1]] {
			t.Errorf("docs/cli.md names --%s, which no command has", m[1])
		}
	}
}
