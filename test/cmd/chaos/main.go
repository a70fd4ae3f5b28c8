// Command chaos runs the chaos suite's long form, or a soak, on a throwaway
// PostgreSQL cluster of its own (never on a shared server: it restarts it).
// See docs/chaos.md.
//
//	go run ./test/cmd/chaos run [-long] [flags]    # kill -9, restarts, terminations; then the verdict
//	go run ./test/cmd/chaos faults [-long] [flags] # the fault matrix: each fault, library and --exec workers
//	go run ./test/cmd/chaos balance [-long] [flags] # identical workers join, die, stop, restart: the slots' shares
//	go run ./test/cmd/chaos soak [flags]           # steady load; memory, goroutines, rotation over time
//
// It exits 0 when the verdict is clean, 1 when it is not, 2 on bad usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/chaos"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: chaos run [-long] [flags]    kill -9 workers, restart PostgreSQL, terminate backends; judge order and loss
       chaos faults [-long] [flags] the fault matrix: every fault, library and --exec workers; judge overlaps too
       chaos balance [-long] [flags] identical workers join, die, stop and restart (with a resize): judge the shares, moves and runs
       chaos soak [flags]           steady load for minutes; report memory, goroutines, table rotation, dead tuples
Run "chaos run -h" or "chaos soak -h" for the flags. See docs/chaos.md.`)
}

func run(args []string) int {
	if len(args) == 0 {
		usage()
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "run":
		return runChaos(ctx, args[1:])
	case "faults":
		return runFaults(ctx, args[1:])
	case "balance":
		return runBalance(ctx, args[1:])
	case "soak":
		return runSoak(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		usage()
		return 0
	}
	usage()
	return 2
}

// common are the flags of both modes.
type common struct {
	port      int
	keep      bool
	workerLog string
	engine    string
	pgqueSQL  string
}

func (c *common) bind(fs *flag.FlagSet) {
	fs.IntVar(&c.port, "port", 0, "port of the throwaway cluster on 127.0.0.1 (default: a free port)")
	fs.BoolVar(&c.keep, "keep", false, "keep the cluster's directory (stopped) when the verdict is not clean")
	fs.StringVar(&c.workerLog, "worker-log", "", "file for the workers' stderr (default: in the cluster's directory, deleted with it)")
	fs.StringVar(&c.engine, "engine", os.Getenv(freshdb.EnvEngine), `queue engine of the run's database: "pgq" or "pgque" (default: $`+freshdb.EnvEngine+`, else pgq)`)
	fs.StringVar(&c.pgqueSQL, "pgque-sql", os.Getenv(freshdb.EnvPgQueSQL), "PgQue's install file, for -engine pgque (default: $"+freshdb.EnvPgQueSQL+")")
}

// eng is the engine the flags choose.
func (c *common) eng() (freshdb.Engine, error) {
	if c.engine == "" {
		return freshdb.Engine{Name: freshdb.PgQ}, nil
	}
	eng, err := freshdb.New(c.engine, c.pgqueSQL)
	if err != nil {
		return freshdb.Engine{}, fmt.Errorf("-engine, -pgque-sql: %w", err)
	}
	return eng, nil
}

// parseExit is the exit status after a flag parse error: 0 for -h.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// setup builds the worker and starts the cluster.
func (c *common) setup(ctx context.Context) (cl *chaos.Cluster, bin string, wlog io.WriteCloser, cleanup func(ok bool), err error) {
	cl, err = chaos.NewCluster(ctx, chaos.ClusterOptions{Port: c.port, Logf: logf})
	if err != nil {
		return nil, "", nil, nil, err
	}
	bin, err = chaos.BuildWorker(ctx, cl.Dir)
	if err != nil {
		cl.Close()
		return nil, "", nil, nil, err
	}
	path := c.workerLog
	if path == "" {
		path = filepath.Join(cl.Dir, "workers.log")
	}
	f, err := os.Create(path)
	if err != nil {
		cl.Close()
		return nil, "", nil, nil, err
	}
	logf("workers' log: %s; server log: %s", path, cl.LogFile())
	return cl, bin, f, func(ok bool) {
		f.Close()
		if !ok && c.keep {
			logf("cluster kept (stopped) in %s", cl.Keep())
			return
		}
		cl.Close()
	}, nil
}

func runChaos(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("chaos run", flag.ContinueOnError)
	var c common
	c.bind(fs)
	long := fs.Bool("long", false, "the long form: 8 workers, 16 slots, 1000 keys, 150 events a key, 5 minutes, 100 kills, 6 restarts, 150 terminations")
	var cfg chaos.Config
	fs.IntVar(&cfg.Workers, "workers", 0, "worker processes (default 4; long 8)")
	fs.IntVar(&cfg.Slots, "slots", 0, "slots N (default 8; long 16)")
	fs.IntVar(&cfg.Keys, "keys", 0, "partition keys (default 300; long 1000)")
	fs.IntVar(&cfg.EventsPerKey, "events-per-key", 0, "events per key (default 40; long 150)")
	fs.IntVar(&cfg.StuckKeys, "stuck-keys", 0, "keys blocked on purpose until the end (default 3; long 5)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "length of the chaos phase (default 40s; long 5m)")
	fs.IntVar(&cfg.Kills, "kills", 0, "kill -9 of a worker process (default 20; long 100)")
	fs.IntVar(&cfg.Restarts, "restarts", 0, "PostgreSQL restarts, alternately fast and immediate (default 2; long 6)")
	fs.IntVar(&cfg.Terminations, "terminations", 0, "pg_terminate_backend rounds (default 20; long 150)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed (default: the clock)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *long {
		l := chaos.Long()
		for _, p := range []struct{ v, d *int }{{&cfg.Workers, &l.Workers}, {&cfg.Slots, &l.Slots}, {&cfg.Keys, &l.Keys},
			{&cfg.EventsPerKey, &l.EventsPerKey}, {&cfg.StuckKeys, &l.StuckKeys}, {&cfg.Kills, &l.Kills},
			{&cfg.Restarts, &l.Restarts}, {&cfg.Terminations, &l.Terminations}} {
			if *p.v == 0 {
				*p.v = *p.d
			}
		}
		if cfg.Duration == 0 {
			cfg.Duration = l.Duration
		}
	}
	var err error
	if cfg.Engine, err = c.eng(); err != nil {
		logf("error: %v", err)
		return 2
	}
	cl, bin, wlog, cleanup, err := c.setup(ctx)
	if err != nil {
		logf("error: %v", err)
		return 1
	}
	cfg.WorkerBin, cfg.WorkerLog, cfg.Logf = bin, wlog, logf
	rep, err := chaos.Run(ctx, cl, cfg)
	ok := err == nil && rep.OK()
	cleanup(ok)
	if *asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Println(string(b))
	} else {
		fmt.Println(rep.String())
	}
	if err != nil {
		logf("error: %v", err)
		return 1
	}
	if !ok {
		logf("verdict: NOT clean")
		return 1
	}
	logf("verdict: clean")
	return 0
}

func runSoak(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("chaos soak", flag.ContinueOnError)
	var c common
	c.bind(fs)
	var cfg chaos.SoakConfig
	fs.DurationVar(&cfg.Duration, "duration", 0, "length of the run (default 5m)")
	fs.IntVar(&cfg.Workers, "workers", 0, "worker processes, each running all slots (default 3)")
	fs.IntVar(&cfg.Slots, "slots", 0, "slots N (default 8)")
	fs.IntVar(&cfg.Keys, "keys", 0, "partition keys (default 200)")
	fs.IntVar(&cfg.Rate, "rate", 0, "events sent per second (default 500)")
	fs.DurationVar(&cfg.SampleEvery, "sample", 0, "sampling period (default 10s)")
	fs.DurationVar(&cfg.RotationPeriod, "rotation-period", 0, "the queue's rotation_period (default 20s)")
	fs.BoolVar(&cfg.NoStuckKey, "no-stuck-key", false, "do not keep one key blocked for the whole run")
	fs.DurationVar(&cfg.FaultEvery, "fault-every", 0, "mean time between faults: a worker killed or every worker session terminated (default 30s; negative: none)")
	fs.DurationVar(&cfg.OperatorEvery, "operator-every", 0, "how often an operator skips poison heads and replays a dead letter (default 15s; negative: none)")
	jsonOut := fs.String("json", "", "also write the samples as JSON to this file")
	svgOut := fs.String("svg", "", "also write a chart of the samples (SVG) to this file")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	var err error
	if cfg.Engine, err = c.eng(); err != nil {
		logf("error: %v", err)
		return 2
	}
	cl, bin, wlog, cleanup, err := c.setup(ctx)
	if err != nil {
		logf("error: %v", err)
		return 1
	}
	cfg.WorkerBin, cfg.WorkerLog, cfg.Logf = bin, wlog, logf
	if cfg.Dir, err = os.MkdirTemp(cl.Dir, "soak-"); err != nil {
		logf("error: %v", err)
		cleanup(false)
		return 1
	}
	rep, err := chaos.Soak(ctx, cl, cfg)
	cleanup(err == nil && rep.OK())
	if err != nil {
		logf("error: %v", err)
		return 1
	}
	fmt.Println(rep.Summary())
	if *svgOut != "" {
		if err := os.WriteFile(*svgOut, rep.SVG(), 0o644); err != nil {
			logf("error: %v", err)
			return 1
		}
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			logf("error: %v", err)
			return 1
		}
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

func runBalance(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("chaos balance", flag.ContinueOnError)
	var c common
	c.bind(fs)
	long := fs.Bool("long", false, "the long form: 16 slots (then 32), 256 keys, 300 events a second (30 with exec), handlers holding up to 300ms, 8 at once per slot and 8 drains per worker, the default lease (5s), 3 minutes of steady membership; 3 runs of each mode")
	mode := fs.String("mode", "both", "workers: library, exec or both")
	var cfg chaos.BalanceConfig
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed (default: the clock)")
	runs := fs.Int("runs", 1, "runs of each mode (long: 3)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *long {
		cfg.Slots, cfg.Keys, cfg.Hold, cfg.Concurrency, cfg.Drains, cfg.Lease, cfg.Steady = 16, 256, 300*time.Millisecond, 8, 8, partitionq.LeaseDurationDefault, 3*time.Minute
		if *runs == 1 {
			*runs = 3
		}
	}
	var err error
	if cfg.Engine, err = c.eng(); err != nil {
		logf("error: %v", err)
		return 2
	}
	modes := map[string][]bool{"library": {false}, "exec": {true}, "both": {false, true}}[*mode]
	if modes == nil {
		logf("error: -mode %q: use library, exec or both", *mode)
		return 2
	}
	cl, bin, wlog, cleanup, err := c.setup(ctx)
	if err != nil {
		logf("error: %v", err)
		return 1
	}
	ok := true
	defer func() { cleanup(ok) }()
	if cfg.ExecBin, cfg.RunWatchBin, err = chaos.BuildCLI(ctx, cl.Dir); err != nil {
		logf("error: %v", err)
		ok = false
		return 1
	}
	cfg.WorkerBin, cfg.WorkerLog, cfg.Logf = bin, wlog, logf
	for range *runs {
		for _, m := range modes {
			run := cfg
			run.Exec = m
			if *long {
				run.Rate = map[bool]int{false: 300, true: 30}[m]
			}
			if run.Dir, err = os.MkdirTemp(cl.Dir, "balance-"); err != nil {
				logf("error: %v", err)
				ok = false
				return 1
			}
			rep, err := chaos.RunBalance(ctx, cl, run)
			fmt.Println(rep.String())
			if err != nil {
				logf("error: %v", err)
				ok = false
			} else if !rep.OK() {
				logf("NOT clean: %v", rep.Examples)
				ok = false
			}
			if cfg.Seed != 0 {
				cfg.Seed++
			}
		}
	}
	if !ok {
		return 1
	}
	return 0
}

func runFaults(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("chaos faults", flag.ContinueOnError)
	var c common
	c.bind(fs)
	long := fs.Bool("long", false, "the long form: 5 workers, 8 slots, 64 keys, 20 events a key, 10 faults of each kind, handlers holding up to 1.5s")
	var cfg chaos.FaultConfig
	only := fs.String("fault", "", "only this fault: kill, terminate-owner, terminate-all, restart, partition or stop (default: all)")
	mode := fs.String("mode", "both", "workers: library, exec or both")
	fs.IntVar(&cfg.Rounds, "rounds", 0, "faults of each kind (default 2; long 10)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed (default: the clock)")
	resizes := fs.String("resizes", "", "resize the group before each fault, to these slot counts in turn (e.g. 8,3,6; one fault each, sent as it starts so the faults hit the drain; the make test form of this is TestFaultsDuringResize: 8,3)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *resizes != "" {
		for _, f := range strings.Split(*resizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err == nil {
				err = partitionq.ValidateSlots(n)
			}
			if err != nil {
				logf("error: -resizes %q: give slot counts from 1 to %d, separated by commas (e.g. 8,3,6)", *resizes, partitionq.MaxSlots)
				return 2
			}
			cfg.Resizes = append(cfg.Resizes, n)
		}
		cfg.SendDuringResize = true
	}
	if *long {
		cfg.Workers, cfg.Slots, cfg.Keys, cfg.EventsPerKey, cfg.Hold = 5, 8, 64, 20, 1500*time.Millisecond
		if cfg.Rounds == 0 {
			cfg.Rounds = 10
		}
	}
	var err error
	if cfg.Engine, err = c.eng(); err != nil {
		logf("error: %v", err)
		return 2
	}
	cl, bin, wlog, cleanup, err := c.setup(ctx)
	if err != nil {
		logf("error: %v", err)
		return 1
	}
	ok := true
	defer func() { cleanup(ok) }()
	if cfg.ExecBin, cfg.RunWatchBin, err = chaos.BuildCLI(ctx, cl.Dir); err != nil {
		logf("error: %v", err)
		ok = false
		return 1
	}
	cfg.WorkerBin, cfg.WorkerLog, cfg.Logf = bin, wlog, logf
	modes := map[string][]bool{"library": {false}, "exec": {true}, "both": {false, true}}[*mode]
	if modes == nil {
		logf("error: -mode %q: use library, exec or both", *mode)
		return 2
	}
	for _, m := range modes {
		for _, f := range chaos.Faults {
			if *only != "" && string(f) != *only {
				continue
			}
			run := cfg
			run.Fault, run.Exec = f, m
			if run.Dir, err = os.MkdirTemp(cl.Dir, "faults-"); err != nil {
				logf("error: %v", err)
				ok = false
				return 1
			}
			rep, err := chaos.RunFault(ctx, cl, run)
			fmt.Println(rep.String())
			if err != nil {
				logf("error: %v", err)
				ok = false
			} else if !rep.OK() {
				logf("NOT clean: %v", rep.Examples)
				ok = false
			}
		}
	}
	if !ok {
		logf("verdict: NOT clean")
		return 1
	}
	logf("verdict: clean")
	return 0
}
