// Package bench is pqbench: it prepares each workload once, runs every
// system on it in turn against one PostgreSQL server, judges each run with
// the shared order checker (internal/ordercheck), measures the database's
// cost per event, and writes a table, a JSON file and an SVG chart.
package bench

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/partitionq/partitionq/internal/freshdb"
)

// Config is one benchmark run. Full and Short return the two standard forms.
type Config struct {
	// AdminURL is the server's maintenance database; the bench creates its
	// own databases (DBPrefix_pgq, DBPrefix_pgque, DBPrefix_pgboss,
	// DBPrefix_graphile) there and drops them at the end unless Keep is set.
	AdminURL string
	DBPrefix string
	Keep     bool

	// Engines lists the queue engines measured: "pgq" (always, first: every
	// step runs on it) and "pgque", on which the producer and W1 steps run
	// again, partitionq and the plain consumer alike, in a database of its
	// own with PgQue installed from PgQueSQL.
	Engines  []string
	PgQueSQL string

	// Out is the directory for results.json, results.md and the charts
	// (nsweep.svg, latency.svg, w2.svg).
	Out string
	// PeersDir holds the Node.js side (bench/peers). Peers turns the peer
	// systems on; they are skipped, with a note, when npm ci fails there.
	PeersDir string
	Peers    bool

	Short bool
	Seed  int64

	W1Events, W1Keys int
	W1Trials         int // each W1 system drains the backlog this many times; the median is reported
	W2Events, W2Keys int
	W2Handler        time.Duration
	W3Events, W3Keys int
	W3Handler        time.Duration
	W3FailRate       float64
	W3ZipfS          float64 // Zipf exponent (> 1)
	W3ZipfV          float64 // Zipf offset (>= 1): larger flattens the head
	W3Backoff        time.Duration

	// Slots and Conc span the partitionq matrix of W2; W3Matrix lists the
	// (N, concurrency) pairs run on W3.
	Slots, Conc []int
	W3Matrix    [][2]int

	// W1 is the N sweep: partitionq with each of Sweep slots in one worker,
	// in-slot concurrency SweepConc; then MultiN slots split over
	// MultiWorkers workers (0: none), and the worker's variants (TxHandler,
	// DisableProgress) at VariantN slots (0: none), all at SweepConc.
	Sweep        []int
	SweepConc    int
	MultiN       int
	MultiWorkers int
	VariantN     int

	// The at-rest step: a worker with IdleSlots idle slots, its database's
	// transactions counted over IdleWindow, with partitionq's ticker off,
	// then on, against the same window with no worker.
	IdleSlots  int
	IdleWindow time.Duration

	SingleSend int // events sent one by one in the producer run

	LatRate     int // events per second
	LatDuration time.Duration
	LatN, LatC  int           // the default-ticks run's N, and every run's in-slot concurrency
	LatFastNs   []int         // the N of each run at the lowest tick settings
	LatFastTick time.Duration // the lowest tick settings measured
	LatTrials   int           // runs of each lowest-ticks N (the row is the median's by p99)

	// ResizeFrom is the N of the resize step's group, split to twice it
	// while a producer sends at LatRate for LatDuration.
	ResizeFrom int

	// The scale step: ScaleN slots drained by each of ScaleWorkers
	// identical workers (W2's workload), each bounded to ScaleLimit
	// handler calls at once; then ScaleRestart identical workers replaced
	// one at a time while a producer sends at LatRate for LatDuration.
	ScaleN, ScaleLimit, ScaleRestart int
	ScaleWorkers                     []int

	PeerWorkers  []int // concurrency of each peer run (W2, W3)
	PeerW1Events int   // W1 prefix the peers drain (they are too slow for all of it)
	// PeerRuns lists the peer runs, each for both peers: W1, W2 (each
	// PeerWorkers), W2bulk (bulk-inserted), W3 (each PeerWorkers), latency.
	PeerRuns []string

	// RunsEvents is the number of events of each workload of the runs
	// step (handlers that write per event and per run).
	RunsEvents int

	// Only, when not empty, lists the steps to run: producer, W1, W2, W3,
	// idle, latency, resize, scale, peers, runs.
	Only []string

	// CPUProfile, when set, is where Main writes a CPU profile of the run.
	CPUProfile string
	// Render, when set, is a directory whose results.json Main renders
	// again (results.md and the charts) instead of running anything.
	Render string

	// RunTimeout bounds one run beyond its expected duration.
	RunTimeout time.Duration
}

// Full is the configuration of `make bench`.
func Full() Config {
	return Config{
		DBPrefix: "pqbench", Out: "bench-out", PeersDir: "bench/peers", Peers: true, Seed: 1, Engines: []string{freshdb.PgQ},
		W1Events: 200_000, W1Keys: 1000, W1Trials: 3,
		W2Events: 20_000, W2Keys: 1000, W2Handler: 5 * time.Millisecond,
		W3Events: 20_000, W3Keys: 1000, W3Handler: 5 * time.Millisecond, W3FailRate: 0.01,
		W3ZipfS: 1.1, W3ZipfV: 10, W3Backoff: 100 * time.Millisecond,
		Slots: []int{1, 2, 4, 8}, Conc: []int{1, 16, 64},
		W3Matrix: [][2]int{{1, 16}, {4, 16}, {8, 16}, {1, 64}, {4, 64}, {8, 64}},
		Sweep:    []int{1, 4, 16, 64, 256}, SweepConc: 16, MultiN: 64, MultiWorkers: 4, VariantN: 16,
		IdleSlots: 256, IdleWindow: 10 * time.Second,
		SingleSend: 20_000,
		LatRate:    1000, LatDuration: 10 * time.Second, LatN: 64, LatC: 16, LatFastTick: 10 * time.Millisecond, LatFastNs: []int{4, 64, 256}, LatTrials: 3, ResizeFrom: 4,
		ScaleN: 16, ScaleLimit: 16, ScaleWorkers: []int{1, 2, 4}, ScaleRestart: 4,
		PeerWorkers: []int{16, 64}, PeerW1Events: 20_000, PeerRuns: []string{"W1", "W2", "W2bulk", "W3", "latency"},
		RunsEvents: 100_000,
		RunTimeout: 2 * time.Minute,
	}
}

// w3Runs is W3's partitionq runs: each of W3Matrix with as many drains of
// blocked keys at once as handler calls per slot (docs/tuning.md's advice
// for a skewed load with failures), and its last configuration again with
// the worker's default drains.
func (c Config) w3Runs() []pqRun {
	out := runsOf(c.W3Matrix)
	for i := range out {
		out[i].Drains = out[i].C
	}
	if len(c.W3Matrix) > 0 {
		last := c.W3Matrix[len(c.W3Matrix)-1]
		out = append(out, pqRun{N: last[0], C: last[1]})
	}
	return out
}

// w1Runs is W1's partitionq runs: the N sweep, the split over several
// workers, the variants.
func (c Config) w1Runs() []pqRun {
	var out []pqRun
	for _, n := range c.Sweep {
		out = append(out, pqRun{N: n, C: c.SweepConc})
	}
	if c.MultiN > 0 && c.MultiWorkers > 1 {
		out = append(out, pqRun{N: c.MultiN, C: c.SweepConc, Workers: c.MultiWorkers})
	}
	if c.VariantN > 0 {
		out = append(out, pqRun{N: c.VariantN, C: c.SweepConc, Variant: VariantTxHandler}, pqRun{N: c.VariantN, C: c.SweepConc, Variant: VariantNoProgress})
	}
	return out
}

// Short is the seconds-long form run by the tests: every system and
// workload on small numbers, to prove the bench and the order guarantee
// still hold, never to judge speed.
func Short() Config {
	return Config{
		DBPrefix: "pqbench_short", Out: "bench-out/short", PeersDir: "bench/peers", Peers: true, Short: true, Seed: 1, Engines: []string{freshdb.PgQ},
		W1Events: 4000, W1Keys: 100, W1Trials: 1,
		W2Events: 600, W2Keys: 100, W2Handler: 5 * time.Millisecond,
		W3Events: 600, W3Keys: 100, W3Handler: 2 * time.Millisecond, W3FailRate: 0.02,
		W3ZipfS: 1.1, W3ZipfV: 5, W3Backoff: 50 * time.Millisecond,
		Slots: []int{1, 4}, Conc: []int{16},
		W3Matrix: [][2]int{{2, 16}},
		Sweep:    []int{1, 4}, SweepConc: 16, MultiN: 4, MultiWorkers: 2, VariantN: 2,
		IdleSlots: 4, IdleWindow: 500 * time.Millisecond,
		SingleSend: 200,
		LatRate:    200, LatDuration: time.Second, LatN: 2, LatC: 16, LatFastTick: 10 * time.Millisecond, LatFastNs: []int{2}, LatTrials: 1, ResizeFrom: 2,
		ScaleN: 4, ScaleLimit: 4, ScaleWorkers: []int{1, 2}, ScaleRestart: 2,
		PeerWorkers: []int{16}, PeerW1Events: 1000, PeerRuns: []string{"W2"},
		RunsEvents: 1000,
		RunTimeout: 45 * time.Second,
	}
}

// parseFlags reads the command line into a Config.
func parseFlags(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("pqbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	short := fs.Bool("short", false, "run the short form (seconds): small workloads, a few configurations")
	db := fs.String("db", "", "admin URL of the PostgreSQL server (with PgQ) to measure on; defaults to $DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres")
	out := fs.String("out", "", "output directory (results.json, results.md and the charts nsweep.svg, latency.svg, w2.svg); defaults to bench-out (bench-out/short with -short)")
	peersDir := fs.String("peers-dir", "", "directory of the Node.js peers (package.json, run.mjs); defaults to bench/peers")
	noPeers := fs.Bool("no-peers", false, "skip pg-boss and graphile-worker")
	keep := fs.Bool("keep", false, "keep the bench databases after the run")
	prefix := fs.String("db-prefix", "", "prefix of the bench's database names; defaults to pqbench (pqbench_short with -short)")
	slots := fs.String("slots", "", "comma-separated N values of the W2 matrix (default 1,2,4,8)")
	conc := fs.String("conc", "", "comma-separated in-slot concurrency values of the W2 matrix (default 1,16,64)")
	sweep := fs.String("sweep", "", "comma-separated N values of W1's N sweep (default 1,4,16,64,256)")
	latN := fs.String("latency-n", "", "comma-separated N values of the latency step's lowest-tick runs (default 4,64,256)")
	latTrials := fs.Int("latency-trials", 0, "trials of each lowest-tick latency run, the median shown (default 3)")
	multi := fs.Int("multi-workers", -1, "W1: how many workers split 64 slots in the several-workers run (default 4; 0 for none)")
	variantN := fs.Int("variant-n", -1, "W1: N of the TxHandler and DisableProgress runs (default 16; 0 for none)")
	w1 := fs.Int("w1-events", 0, "W1 backlog size (default 200000)")
	w2 := fs.Int("w2-events", 0, "W2 size (default 20000)")
	w2keys := fs.Int("w2-keys", 0, "W2 keys (default 1000)")
	peerWorkers := fs.String("peer-workers", "", "comma-separated concurrency of the peers' W2 and W3 runs (default 16,64)")
	render := fs.String("render", "", "render DIR/results.json of an earlier run again (results.md and the charts) and print it; runs nothing")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the bench process to this file")
	only := fs.String("only", "", "comma-separated steps to run: producer, W1, W2, W3, idle, latency, resize, scale, peers, runs (default all)")
	peerRuns := fs.String("peer-runs", "", "comma-separated peer runs: W1, W2, W2bulk, W3, latency (default all; W2 with -short)")
	engines := fs.String("engines", "pgq", "comma-separated queue engines: pgq, and pgque to run the producer and W1 on PgQue as well")
	pgqueSQL := fs.String("pgque-sql", os.Getenv(freshdb.EnvPgQueSQL), "PgQue's install file (PgQue's sql/pgque.sql), for -engines pgq,pgque (default $"+freshdb.EnvPgQueSQL+")")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: pqbench [flags]\n\nRuns the partitionq benchmark (docs/benchmarks.md) and prints its tables.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q: pqbench takes flags only", fs.Args())
	}
	cfg := Full()
	if *short {
		cfg = Short()
	}
	cfg.AdminURL = *db
	if *out != "" {
		cfg.Out = *out
	}
	if *peersDir != "" {
		cfg.PeersDir = *peersDir
	}
	if *prefix != "" {
		cfg.DBPrefix = *prefix
	}
	cfg.Peers = !*noPeers
	cfg.Keep = *keep
	var err error
	if *slots != "" {
		if cfg.Slots, err = intList("slots", *slots); err != nil {
			return Config{}, err
		}
	}
	if *conc != "" {
		if cfg.Conc, err = intList("conc", *conc); err != nil {
			return Config{}, err
		}
	}
	if *sweep != "" {
		if cfg.Sweep, err = intList("sweep", *sweep); err != nil {
			return Config{}, err
		}
	}
	if *latN != "" {
		if cfg.LatFastNs, err = intList("latency-n", *latN); err != nil {
			return Config{}, err
		}
	}
	if *latTrials > 0 {
		cfg.LatTrials = *latTrials
	}
	if *multi >= 0 {
		cfg.MultiWorkers = *multi
	}
	if *variantN >= 0 {
		cfg.VariantN = *variantN
	}
	cfg.CPUProfile = *cpuprofile
	cfg.Render = *render
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	if *peerRuns != "" {
		cfg.PeerRuns = strings.Split(*peerRuns, ",")
	}
	if *w1 > 0 {
		cfg.W1Events = *w1
	}
	if *w2 > 0 {
		cfg.W2Events = *w2
	}
	if *w2keys > 0 {
		cfg.W2Keys = *w2keys
	}
	if *peerWorkers != "" {
		if cfg.PeerWorkers, err = intList("peer-workers", *peerWorkers); err != nil {
			return Config{}, err
		}
	}
	cfg.Engines, cfg.PgQueSQL = strings.Split(*engines, ","), *pgqueSQL
	if err := cfg.validateEngines(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// validateEngines checks Engines (pgq first, then maybe pgque) and that
// PgQue's install file is there when asked for.
func (c Config) validateEngines() error {
	if len(c.Engines) == 0 || c.Engines[0] != freshdb.PgQ || len(c.Engines) > 2 ||
		(len(c.Engines) == 2 && c.Engines[1] != freshdb.PgQue) {
		return fmt.Errorf("invalid -engines %q: give pgq, or pgq,pgque", strings.Join(c.Engines, ","))
	}
	if len(c.Engines) == 2 {
		if _, err := freshdb.New(freshdb.PgQue, c.PgQueSQL); err != nil {
			return fmt.Errorf("-engines pgq,pgque: %w (or -pgque-sql)", err)
		}
	}
	return nil
}

func intList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("invalid -%s %q: give positive integers separated by commas, e.g. 1,4", name, s)
		}
		out = append(out, n)
	}
	return out, nil
}
