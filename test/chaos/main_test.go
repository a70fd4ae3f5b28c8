package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/partitionq/partitionq/test/chaos"
)

// The package's tests share one throwaway cluster (they restart it, so it
// is never the shared server) and run one at a time.
var (
	workDir    string
	workerBin  string
	cliBin     string // cmd/partitionq, for the --exec half of the fault matrix
	watchBin   string // test/cmd/runwatch, likewise
	clusterMu  sync.Mutex
	cluster    *chaos.Cluster
	clusterErr error
)

func TestMain(m *testing.M) {
	var err error
	if workDir, err = os.MkdirTemp("", "pqchaos-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if workerBin, err = chaos.BuildWorker(context.Background(), workDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if cliBin, watchBin, err = chaos.BuildCLI(context.Background(), workDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	clusterMu.Lock()
	if cluster != nil {
		if os.Getenv("PQ_CHAOS_KEEP") != "" && code != 0 {
			fmt.Fprintf(os.Stderr, "chaos: cluster kept in %s\n", cluster.Keep())
		} else if err := cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: close the cluster:", err)
		}
	}
	clusterMu.Unlock()
	if os.Getenv("PQ_CHAOS_KEEP") != "" && code != 0 {
		fmt.Fprintf(os.Stderr, "chaos: the workers' logs and binaries kept in %s\n", workDir)
	} else {
		os.RemoveAll(workDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needCluster returns the package's throwaway cluster, made on first use.
// Without PostgreSQL's server programs the test is skipped, unless CI is
// set: then it fails.
func needCluster(t *testing.T) *chaos.Cluster {
	t.Helper()
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if cluster == nil && clusterErr == nil {
		cluster, clusterErr = chaos.NewCluster(context.Background(), chaos.ClusterOptions{Logf: t.Logf})
	}
	if errors.Is(clusterErr, chaos.ErrNoPostgres) && os.Getenv("CI") == "" {
		t.Skipf("%v (CI is unset, so this is a skip)", clusterErr)
	}
	if clusterErr != nil {
		t.Fatalf("throwaway cluster: %v", clusterErr)
	}
	return cluster
}

// workerLog opens a file for the workers' stderr; its path is logged when
// the test fails.
func workerLog(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(workDir, strings.ReplaceAll(t.Name(), "/", "_")+".workers.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if t.Failed() {
			if b, err := os.ReadFile(f.Name()); err == nil {
				if len(b) > 8000 {
					b = b[len(b)-8000:]
				}
				t.Logf("end of the workers' log:\n%s", b)
			}
		}
	})
	return f
}
