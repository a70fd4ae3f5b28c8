package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// versionJSON is the --json output of version (docs/cli.md).
type versionJSON struct {
	Version string `json:"version"`
	Go      string `json:"go"`
}

func (a *app) versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of partitionq",
		Args:  noWords,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), versionJSON{Version: partitionq.Version, Go: runtime.Version()})
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "partitionq %s (%s)\n", partitionq.Version, runtime.Version())
			return err
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
