package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// A flag that --help marks "(required)" is required: the command without
// it (every other flag marked so given) is a usage error naming it, before
// any connection (the database here does not answer). And the console,
// which takes --queue and --group or neither, marks neither so.
func TestRequiredInHelpIsRequired(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string {
				if k == "DATABASE_URL" {
					return "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"
				}
				return ""
			}})
		return code, errb.String()
	}
	root := newRoot(Env{}.withDefaults())
	checked := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.Hidden || c.Name() == "help" {
			return
		}
		var required []string
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "(required)") {
				required = append(required, f.Name)
			}
		})
		if c.Name() == "console" && len(required) > 0 {
			t.Errorf("partitionq console --help marks %v (required); the console takes --queue and --group, or neither", required)
		}
		path := strings.Fields(c.CommandPath())[1:]
		for _, missing := range required {
			args := slices.Clone(path)
			for _, other := range required {
				if other != missing {
					args = append(args, "--"+other, "1")
				}
			}
			if strings.Contains(c.Use, " ID") && c.Name() != "purge" {
				args = append(args, "1")
			}
			code, stderr := run(args...)
			if code != ExitUsage || !strings.Contains(stderr, "missing --"+missing) {
				t.Errorf("partitionq %s, without --%s which --help marks (required): want a usage error naming it, got exit %d: %s",
					strings.Join(args, " "), missing, code, stderr)
			}
			checked++
		}
	}
	walk(root)
	if checked < 10 {
		t.Fatalf("only %d required flags checked", checked)
	}
}
