package security_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind (a
// worker, a ticker or a pool not stopped).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// The command's guardian of --exec commands (internal/cli) lives
		// as long as the process, by design.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/partitionq/partitionq/internal/cli.spawnLoop"),
			goleak.IgnoreAnyFunction("github.com/partitionq/partitionq/internal/cli.(*guardian).wait")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
