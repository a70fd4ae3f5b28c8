package tui

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when they leave goroutines behind:
// workers, pools and the proxy must all be stopped by their cleanups.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
