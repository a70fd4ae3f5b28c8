package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/partitionq/partitionq/partitionq"
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

// keys --help and key --help give the bounds of the library's reads as
// docs/cli.md gives them (the library's TestDocsStateTheBounds checks that
// docs/cli.md gives the code's).
func TestHelpGivesTheDocsBounds(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	root := newRoot(Env{}.withDefaults())
	for name, phrases := range map[string][]string{
		"keys": {"up to 200,000 pending events", "about 30,000"},
		"key":  {"Up to 20 of each are listed"},
	} {
		cmd, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		help := strings.Join(strings.Fields(cmd.Long), " ")
		for _, p := range phrases {
			if !strings.Contains(help, p) || !strings.Contains(doc, p) {
				t.Errorf("%s --help and docs/cli.md do not both say %q", name, p)
			}
		}
	}
}

// The worker's connections are counted the same in docs/cli.md,
// docs/tuning.md and docs/architecture.md as in the code: the fixed ones
// (a lease session, two readers, two to open and finish batches, one for
// the ticker) add up to partitionq.WorkerConns() less the drains.
func TestDocsCountTheWorkersConnections(t *testing.T) {
	fixed := partitionq.WorkerConns() - partitionq.DrainConcurrencyDefault
	parts := map[string]int{"lease session": 1, "two readers of": 2, "two to open and finish batches": 2, "one for the ticker": 1}
	sum := 0
	for _, n := range parts {
		sum += n
	}
	if sum != fixed {
		t.Fatalf("the parts listed add up to %d, the code has %d fixed connections: update this test and the docs", sum, fixed)
	}
	for file, total := range map[string]string{
		"cli.md":          fmt.Sprintf("at\nmost *%d + drains*", fixed),
		"tuning.md":       fmt.Sprintf("(%d + `DrainConcurrency`)", fixed),
		"architecture.md": fmt.Sprintf("%d + `DrainConcurrency` connections", fixed),
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", file))
		if err != nil {
			t.Fatal(err)
		}
		doc := strings.Join(strings.Fields(string(b)), " ")
		if !strings.Contains(doc, strings.Join(strings.Fields(total), " ")) {
			t.Errorf("docs/%s does not give the worker's connections as %q", file, total)
		}
		for p := range parts {
			if !strings.Contains(doc, p) {
				t.Errorf("docs/%s does not list %q among the worker's connections", file, p)
			}
		}
	}
}

// The README's comparison figures are docs/benchmarks.md's (its current
// figures): partitionq's and each peer's events per second, W2 and W3.
func TestReadmeFiguresAreTheBenchmarks(t *testing.T) {
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", p))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(b)), " ")
	}
	readme, bench := read("README.md"), read("docs/benchmarks.md")
	for _, w := range []struct{ workload, readme, bench string }{
		{"W2", `\| 20,000 events over 1,000 tenants, a 5 ms handler: events/s, each system's best \| (\S+) \| (\S+) \| (\S+) \|`,
			`\| W2 \(5 ms handler\), best rate against the peers' best \| partitionq (\S+) events/s \([^)]*\); pg-boss (\S+); graphile-worker (\S+) \|`},
		{"W3", `\| the same with skewed tenants and 1% of events failing once \| (\S+) \| (\S+) \| (\S+) \|`,
			`\| W3 against the peers' best \| partitionq (\S+) events/s \([^)]*\); pg-boss (\S+); graphile-worker (\S+) \|`},
	} {
		r := regexp.MustCompile(w.readme).FindStringSubmatch(readme)
		b := regexp.MustCompile(w.bench).FindStringSubmatch(bench)
		switch {
		case r == nil:
			t.Errorf("README.md: no %s row (partitionq, pg-boss, graphile-worker) in its Measured table", w.workload)
		case b == nil:
			t.Errorf("docs/benchmarks.md: no %s row against the peers in its current figures", w.workload)
		case r[1] != b[1] || r[2] != b[2] || r[3] != b[3]:
			t.Errorf("%s: README.md says %s / %s / %s (partitionq / pg-boss / graphile-worker), docs/benchmarks.md %s / %s / %s",
				w.workload, r[1], r[2], r[3], b[1], b[2], b[3])
		}
	}
}
