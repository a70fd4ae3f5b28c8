package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// workFlags are the flags of work.
type workFlags struct {
	exec            string
	slots           string
	concurrency     int
	policy          string
	maxAttempts     int
	deadHost        time.Duration
	backoffMin      time.Duration
	backoffMax      time.Duration
	handlerTimeout  time.Duration
	shutdownTimeout time.Duration
	liveness        time.Duration
	pollInterval    time.Duration
	ticker          bool
	tickInterval    time.Duration
	identity        string
	drains          int
	lease           time.Duration
	noProgress      bool
	metricsAddr     string
	webConfig       string
}

func (a *app) workCmd() *cobra.Command {
	var (
		t target
		w workFlags
	)
	cmd := &cobra.Command{
		Use:   "work",
		Short: "Run a worker that hands each event to a shell command",
		Long: `Run a worker for the group's slots (all, or --slots). For each event it
runs --exec with sh -c, the payload on standard input and the event in
environment variables:

  PARTITIONQ_EVENT_ID PARTITIONQ_KEY PARTITIONQ_TYPE PARTITIONQ_SLOT
  PARTITIONQ_ATTEMPT PARTITIONQ_QUEUE PARTITIONQ_GROUP PARTITIONQ_EVENT_TIME

Exit status 0 means done. Anything else is a failure, whose last lines of
standard error (20 lines, 4 KiB) become the error shown by blocked and
dlq. A command still running after --handler-timeout is killed, with its
whole process group, and counts as a failure. The commands' standard
output goes to this standard output, their standard error to this one.

Events of one key run one at a time, in order; up to --concurrency keys
per slot at once. SIGTERM or SIGINT stops the worker gracefully: running
commands get --shutdown-timeout to finish (then they are killed), the
slots are released, and the worker exits, within --shutdown-timeout + 10s
of the signal: give the platform's grace period (Kubernetes'
terminationGracePeriodSeconds) at least that, 30s with the defaults.
Per-slot counts are printed to standard error at exit.

With --metrics-addr the worker also serves its liveness at /livez (200
while its loops turn; 503 when one has been stuck for --liveness-timeout)
and its readiness at /readyz (200 while it is registered and renews its
lease, a standby that owns no slot included; 503 before, while the
database does not answer or refuses it, and once it is stopping).`,
		Example: `  partitionq work --queue files --group indexer --exec ./index-file.sh
  partitionq work --queue files --group indexer --slots 0-3 --policy retry-later --exec 'python3 handle.py'`,
		Args: noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			if err := need("exec", w.exec, "give the command to run for each event, e.g. --exec ./handle.sh"); err != nil {
				return err
			}
			switch w.policy {
			case string(partitionq.PolicyPause), string(partitionq.PolicyRetryLater):
			case "skip": // the policy's old name, kept working for one release
				fmt.Fprintln(a.env.Stderr, `partitionq: --policy skip is now --policy retry-later ("skip" is the operator's action); use retry-later, skip will go in a later release`)
				w.policy = string(partitionq.PolicyRetryLater)
			default:
				return usagef(`invalid --policy %s: use "pause" (a failed event blocks its key) or "retry-later" (retried later, the key goes on)`, termsafe.Echo(w.policy))
			}
			if err := w.validateZeros(cmd.Flags().Changed("backoff-max")); err != nil {
				return err
			}
			if cmd.Flags().Changed("liveness-timeout") && w.liveness == 0 {
				return usagef("invalid --liveness-timeout 0s: give a positive duration, at least twice --lease-duration (default %s)", partitionq.LivenessTimeoutDefault)
			}
			if cmd.Flags().Changed("metrics-addr") {
				if err := checkMetricsAddr(w.metricsAddr); err != nil {
					return err
				}
			}
			if w.webConfig != "" && w.metricsAddr == "" {
				return usagef("--metrics-web-config needs --metrics-addr: give the address to serve the metrics at, e.g. --metrics-addr 127.0.0.1:9464")
			}
			return a.work(cmd, t, w)
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	f.StringVar(&w.exec, "exec", "", "shell command run for each event (required)")
	f.StringVar(&w.slots, "slots", "all", `slots to run: "all" (share the group's slots with the other workers), or a list such as 0,2,5-7 (run only these: a pin)`)
	f.IntVar(&w.concurrency, "concurrency", partitionq.ConcurrencyDefault, "events of different keys handled at once per slot")
	f.IntVar(&w.drains, "drain-concurrency", 0, fmt.Sprintf("pause policy: blocked keys retried and drained at once, across all the worker's slots, each on a connection of its own (default %d)", partitionq.DrainConcurrencyDefault))
	f.DurationVar(&w.lease, "lease-duration", partitionq.LeaseDurationDefault, "how long the worker's slots stay its own without a renewal of its lease; a standby takes the slots of a worker that died about this long after")
	f.DurationVar(&w.deadHost, "dead-host-timeout", 0, "how long the server keeps the sessions of a worker whose host vanished (the worker sets its sessions' TCP keepalives); 0: the lease duration + 10s; negative (-1s): the server's settings")
	f.BoolVar(&w.noProgress, "no-progress", false, "do not record progress inside open batches (after a fault the whole open batch runs again)")
	f.StringVar(&w.policy, "policy", string(partitionq.PolicyPause), `on failure: "pause" blocks the key until resolved, "retry-later" retries later and lets the key go on`)
	f.IntVar(&w.maxAttempts, "max-attempts", 0, fmt.Sprintf("tries before an event becomes a dead letter; 0: unlimited under pause, %d under retry-later; -1: unlimited", partitionq.MaxAttemptsSkipDefault))
	f.DurationVar(&w.backoffMin, "backoff-min", partitionq.BackoffMinDefault, "delay before the first retry; doubled on each retry")
	f.DurationVar(&w.backoffMax, "backoff-max", partitionq.BackoffMaxDefault, "longest delay between retries")
	f.DurationVar(&w.handlerTimeout, "handler-timeout", partitionq.HandlerTimeoutDefault, "kill a command running longer (a failure); 0: no timeout")
	f.DurationVar(&w.shutdownTimeout, "shutdown-timeout", partitionq.ShutdownTimeoutDefault, "on SIGTERM/SIGINT, how long running commands may finish before they are killed; the worker exits within this + 10s")
	f.DurationVar(&w.liveness, "liveness-timeout", 0, fmt.Sprintf("how long a loop of the worker may go without a turn before /livez reports it stuck (default %s, at least twice --lease-duration)", partitionq.LivenessTimeoutDefault))
	f.DurationVar(&w.pollInterval, "poll-interval", partitionq.PollIntervalDefault, "wait between two looks for new events of an idle slot")
	f.BoolVar(&w.ticker, "ticker", false, "run the engine's ticker in this worker (instead of pgqd or partitionq tick)")
	f.DurationVar(&w.tickInterval, "tick-interval", partitionq.TickIntervalDefault, "how often the in-process ticker runs (with --ticker)")
	f.StringVar(&w.identity, "identity", "", "name of this worker in status (default partitionq:<host>:<pid>)")
	f.StringVar(&w.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://HOST:PORT/metrics, liveness at /livez and readiness at /readyz, while the worker runs (e.g. 127.0.0.1:9464)")
	f.StringVar(&w.webConfig, "metrics-web-config", "", "serve the metrics with TLS and/or basic auth, as this web configuration file says (the format of Prometheus's exporters)")
	return cmd
}

// validateZeros refuses the values the library would take for "the
// default": a flag given as 0 means 0, never silently something else.
// Other bad values are the library's to refuse (told with the flag by
// inFlagWords).
func (w workFlags) validateZeros(backoffMaxGiven bool) error {
	if backoffMaxGiven && w.backoffMax == 0 {
		return usagef("invalid --backoff-max 0s: give a positive duration, at least --backoff-min (default %s)", partitionq.BackoffMaxDefault)
	}
	if w.concurrency == 0 {
		return usagef("invalid --concurrency 0: give 1 to 4096 keys handled at once per slot (default %d)", partitionq.ConcurrencyDefault)
	}
	for _, d := range []struct {
		flag   string
		v, def time.Duration
	}{
		{"--backoff-min", w.backoffMin, partitionq.BackoffMinDefault},
		{"--shutdown-timeout", w.shutdownTimeout, partitionq.ShutdownTimeoutDefault},
		{"--poll-interval", w.pollInterval, partitionq.PollIntervalDefault},
		{"--tick-interval", w.tickInterval, partitionq.TickIntervalDefault},
	} {
		if d.v == 0 {
			return usagef("invalid %s 0s: give a positive duration (default %s)", d.flag, d.def)
		}
	}
	if w.tickInterval < 0 { // refused with or without --ticker, which alone passes it on
		return usagef("invalid --tick-interval %s: give a positive duration (default %s)", w.tickInterval, partitionq.TickIntervalDefault)
	}
	return nil
}

func (a *app) work(cmd *cobra.Command, t target, w workFlags) error {
	ctx := cmd.Context()
	s, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	g, err := s.client.Group(ctx, t.queue, t.group)
	if err != nil {
		return err
	}
	// --slots all follows the group through resizes; a list pins the
	// worker to those slots of the current generation (it stops when a
	// resize ends that generation).
	var slots []int
	if w.slots != "all" {
		if slots, err = parseSlots(w.slots, g.Slots); err != nil {
			return err
		}
	}
	if w.ticker { // before anything starts: refused at once, said once
		if err := s.client.CheckTickerRights(ctx); err != nil {
			return err
		}
	}
	// Up before the first command, so that a worker killed at any moment
	// takes its commands with it.
	if err := startGuardian(); err != nil {
		return err
	}
	cfg := partitionq.WorkerConfig{
		Queue: t.queue, Group: t.group, Slots: slots,
		Handler: &execHandler{command: w.exec, environ: os.Environ(), stdout: a.env.Stdout, stderr: a.env.Stderr},
		Retry:   partitionq.RetryConfig{Policy: partitionq.Policy(w.policy), MaxAttempts: w.maxAttempts, BackoffMin: w.backoffMin},
		Limits: partitionq.LimitsConfig{Concurrency: w.concurrency, DrainConcurrency: w.drains,
			HandlerTimeout: w.handlerTimeout, ShutdownTimeout: w.shutdownTimeout, PollInterval: w.pollInterval,
			LivenessTimeout: w.liveness},
		Ownership:       partitionq.OwnershipConfig{LeaseDuration: w.lease, DeadHostTimeout: w.deadHost},
		DisableProgress: w.noProgress, Identity: w.identity,
	}
	if w.ticker { // --tick-interval alone changes nothing: no ticker runs
		cfg.Ticker = &partitionq.TickerConfig{Interval: w.tickInterval}
	}
	if cmd.Flags().Changed("backoff-max") {
		cfg.Retry.BackoffMax = w.backoffMax // else the library's default, raised to BackoffMin
	}
	if cfg.Limits.HandlerTimeout == 0 {
		cfg.Limits.HandlerTimeout = -1 // no timeout
	}
	var metrics *metricsServer
	if w.metricsAddr != "" {
		if metrics, err = listenMetrics(w.metricsAddr, w.webConfig, s.log); err != nil {
			return err
		}
		cfg.Registerer = metrics.reg
	}
	worker, err := s.client.NewWorker(ctx, cfg)
	if err == nil {
		err = worker.Start(ctx)
	}
	if err != nil {
		if metrics != nil {
			metrics.close()
		}
		return err
	}
	which := "all"
	if slots != nil {
		which = joinInts(slots)
	}
	fmt.Fprintf(a.env.Stderr, "partitionq: working queue %q group %q: slots %s of %d, policy %s; stop with SIGTERM or Ctrl-C\n",
		t.queue, t.group, which, g.Slots, w.policy)
	if metrics != nil {
		metrics.serve(worker)
		fmt.Fprintf(a.env.Stderr, "partitionq: serving metrics at %s\n", metrics.URL("/metrics"))
		fmt.Fprintf(a.env.Stderr, "partitionq: serving liveness at %s and readiness at %s\n", metrics.URL("/livez"), metrics.URL("/readyz"))
	}
	select {
	case <-ctx.Done():
	case <-worker.Done():
	}
	// The commands get the shutdown timeout, then they are killed; the
	// stop then records the progress of the batches left open and releases
	// the slots, which takes milliseconds when the database answers. The
	// whole stop is bounded by stopMargin more, so that the process exits
	// within a grace period the platform gives it (Kubernetes kills it 30s
	// after SIGTERM by default): a stop that cannot end in time (the
	// database does not answer) leaves the slots to their lease.
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(w.shutdownTimeout, 0)+stopMargin)
	defer cancel()
	stopErr := worker.Stop(stopCtx)
	if metrics != nil {
		if err := metrics.shutdown(stopCtx); err != nil {
			fmt.Fprintf(a.env.Stderr, "partitionq: stopping the metrics server: %v\n", err)
		}
	}
	printStats(a.env.Stderr, worker.Stats())
	if stopErr != nil {
		return fmt.Errorf("the worker did not stop in time: %w", stopErr)
	}
	return worker.Err() // nil after a signal; why it stopped on its own otherwise
}

// stopMargin is how long work's stop may take beyond --shutdown-timeout:
// the killed commands' return (at most execWaitDelay), the last progress,
// the release of the slots and the end of a scrape under way.
const stopMargin = 10 * time.Second

// printStats writes this worker's per-slot counts.
func printStats(w io.Writer, stats []partitionq.SlotStats) {
	fmt.Fprintln(w, "partitionq: worker stopped; per slot:")
	tb := newTable(w, "SLOT", "HANDLED", "FAILED", "SET ASIDE", "DEAD LETTERED", "BATCHES", "LAST BATCH")
	multi := false
	for _, st := range stats {
		multi = multi || st.Slots != stats[0].Slots
	}
	for _, st := range stats {
		slot := strconv.Itoa(st.Slot)
		if multi { // both generations of a resize: "3/4" is slot 3 of 4
			slot += "/" + strconv.Itoa(st.Slots)
		}
		tb.row(slot, i64(st.Handled), i64(st.Failed), i64(st.SetAside),
			i64(st.DeadLettered), i64(st.Batches), fmtTime(st.LastBatch))
	}
	tb.flush() // stderr
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
