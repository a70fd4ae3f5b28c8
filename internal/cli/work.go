package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
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
	http            string
	httpConfig      string
	pipe            string
	cancelGrace     time.Duration
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
	runs            bool
	maxRun          int
}

func (a *app) workCmd() *cobra.Command {
	var (
		t target
		w workFlags
	)
	cmd := &cobra.Command{
		Use:   "work",
		Short: "Run a worker that hands each event to a handler in any language",
		Long: `Run a worker for the group's slots (all, or --slots). It hands each event
to one of three kinds of handler (docs/cli.md gives every field of
the messages, docs/handlers.md examples in Node.js and Python):

--exec CMD   runs sh -c CMD per event, the payload on standard input and
             the event in environment variables:
               PARTITIONQ_EVENT_ID PARTITIONQ_KEY PARTITIONQ_TYPE PARTITIONQ_SLOT
               PARTITIONQ_SLOTS PARTITIONQ_EPOCH PARTITIONQ_FENCE PARTITIONQ_ATTEMPT
               PARTITIONQ_QUEUE PARTITIONQ_GROUP PARTITIONQ_EVENT_TIME
               PARTITIONQ_RETRY_AFTER_FILE
             Exit status 0 is done; 65 a dead letter now; 75 a failure
             retried after the seconds written to $PARTITIONQ_RETRY_AFTER_FILE;
             anything else a failure, whose last lines of standard error
             (20 lines, 4 KiB) become the error shown by blocked and dlq.
--http URL   posts each event to URL as a CloudEvent (binary mode: the
             payload is the body, the event's attributes ce-* headers), over
             kept-alive connections. 2xx is done; any other status a failure,
             a dead letter now with the header Partitionq-Outcome: dead-letter,
             retried after Retry-After when given. TLS and credentials come
             from --http-config FILE or $PARTITIONQ_HTTP_TOKEN
             ($PARTITIONQ_HTTP_USER and $PARTITIONQ_HTTP_PASSWORD).
--pipe CMD   starts sh -c CMD once (again if it ends) and writes each event
             to it as a JSON line; it answers one JSON line per event, in
             any order, several in flight. A cancelled event is sent a cancel
             line; unanswered after --pipe-cancel-grace, the process group is
             killed.

--runs       with --http or --pipe: hands a key's consecutive events (up
             to --max-run, 64) in one request, a JSON array (a CloudEvents
             batch; the pipe's "events"); a failure names its first event
             not done by its index (the header Partitionq-Failed-Index; the
             reply's "index"): the events before it are done.

A handler still running after --handler-timeout (or whose slot the worker
lost) is stopped: an --exec command is killed with its whole process group,
an --http request cancelled, a --pipe event cancelled. That counts as a
failure.

Events of one key run one at a time, in order; up to --concurrency keys
per slot at once. SIGTERM or SIGINT stops the worker gracefully: running
handlers get --shutdown-timeout to finish (then they are stopped), the
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
  partitionq work --queue files --group indexer --slots 0-3 --policy retry-later --exec 'python3 handle.py'
  partitionq work --queue files --group indexer --http http://127.0.0.1:8080/events
  partitionq work --queue files --group indexer --pipe 'python3 pipe_handler.py'
  partitionq work --queue files --group indexer --runs --max-run 32 --pipe 'python3 pipe_handler.py'`,
		Args: noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			if err := t.need(); err != nil {
				return err
			}
			if err := w.validateHandler(cmd.Flags().Changed("pipe-cancel-grace")); err != nil {
				return err
			}
			if err := w.validateRuns(cmd.Flags().Changed("max-run")); err != nil {
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
	f.StringVar(&w.exec, "exec", "", "shell command run for each event (one of --exec, --http, --pipe)")
	f.StringVar(&w.http, "http", "", "URL each event is posted to, as a CloudEvent (one of --exec, --http, --pipe)")
	f.StringVar(&w.httpConfig, "http-config", "", "file of --http's TLS settings and credentials (docs/handlers.md)")
	f.StringVar(&w.pipe, "pipe", "", "shell command started once, which takes the events as JSON lines (one of --exec, --http, --pipe)")
	f.DurationVar(&w.cancelGrace, "pipe-cancel-grace", pipeCancelGraceDefault, "how long a --pipe process has to answer a cancelled event before its process group is killed; less than --lease-duration/5")
	f.BoolVar(&w.runs, "runs", false, "--http and --pipe: hand runs of consecutive events of one key (up to --max-run) in one request, a JSON array (docs/handlers.md)")
	f.IntVar(&w.maxRun, "max-run", partitionq.MaxRunDefault, "with --runs: the most events of one key in one request")
	f.StringVar(&w.slots, "slots", "all", `slots to run: "all" (share the group's slots with the other workers), or a list such as 0,2,5-7 (run only these: a pin)`)
	f.IntVar(&w.concurrency, "concurrency", partitionq.ConcurrencyDefault, "events of different keys handled at once per slot")
	f.IntVar(&w.drains, "drain-concurrency", 0, fmt.Sprintf("pause policy: blocked keys retried and drained at once, across all the worker's slots, each on a connection of its own (default: 8 at first, more as blocked keys wait for a drain, up to %d)", partitionq.DrainConcurrencyDefault))
	f.DurationVar(&w.lease, "lease-duration", partitionq.LeaseDurationDefault, "how long the worker's slots stay its own without a renewal of its lease; a standby takes the slots of a worker that died about this long after")
	f.DurationVar(&w.deadHost, "dead-host-timeout", 0, "how long the server keeps the sessions of a worker whose host vanished (the worker sets its sessions' TCP keepalives); 0: the lease duration + 10s; negative (-1s): the server's settings")
	f.BoolVar(&w.noProgress, "no-progress", false, "do not record progress inside open batches (after a fault the whole open batch runs again)")
	f.StringVar(&w.policy, "policy", string(partitionq.PolicyPause), `on failure: "pause" blocks the key until resolved, "retry-later" retries later and lets the key go on`)
	f.IntVar(&w.maxAttempts, "max-attempts", 0, fmt.Sprintf("tries before an event becomes a dead letter; 0: unlimited under pause, %d under retry-later; -1: unlimited", partitionq.MaxAttemptsRetryLaterDefault))
	f.DurationVar(&w.backoffMin, "backoff-min", partitionq.BackoffMinDefault, "delay before the first retry; doubled on each retry")
	f.DurationVar(&w.backoffMax, "backoff-max", partitionq.BackoffMaxDefault, "longest delay between retries")
	f.DurationVar(&w.handlerTimeout, "handler-timeout", partitionq.HandlerTimeoutDefault, "stop a handler running longer (a failure); 0: no timeout")
	f.DurationVar(&w.shutdownTimeout, "shutdown-timeout", partitionq.ShutdownTimeoutDefault, "on SIGTERM/SIGINT, how long running handlers may finish before they are stopped; the worker exits within this + 10s")
	f.DurationVar(&w.liveness, "liveness-timeout", 0, fmt.Sprintf("how long a loop of the worker may go without a turn before /livez reports it stuck (default %s, at least twice --lease-duration)", partitionq.LivenessTimeoutDefault))
	f.DurationVar(&w.pollInterval, "poll-interval", partitionq.PollIntervalDefault, "wait between two looks for new events of an idle slot")
	f.BoolVar(&w.ticker, "ticker", false, "run the engine's ticker in this worker (instead of pgqd or partitionq tick)")
	f.DurationVar(&w.tickInterval, "tick-interval", partitionq.TickIntervalDefault, "how often the in-process ticker runs (with --ticker)")
	f.StringVar(&w.identity, "identity", "", "name of this worker in status (default partitionq:<host>:<pid>)")
	f.StringVar(&w.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://HOST:PORT/metrics, liveness at /livez and readiness at /readyz, while the worker runs (e.g. 127.0.0.1:9464)")
	f.StringVar(&w.webConfig, "metrics-web-config", "", "serve the metrics with TLS and/or basic auth, as this web configuration file says (the format of Prometheus's exporters)")
	return cmd
}

// validateHandler checks that one kind of handler is given, with the
// flags that go with it.
func (w *workFlags) validateHandler(graceGiven bool) error {
	n := 0
	for _, v := range []string{w.exec, w.http, w.pipe} {
		if v != "" {
			n++
		}
	}
	switch {
	case n == 0:
		return usagef("missing the handler: give one of --exec CMD (a command per event), --http URL (a POST per event) or --pipe CMD (one process for all events); docs/handlers.md")
	case n > 1:
		return usagef("give one handler: --exec, --http or --pipe, not several")
	case w.httpConfig != "" && w.http == "":
		return usagef("--http-config needs --http: give the URL the events are posted to")
	case graceGiven && w.pipe == "":
		return usagef("--pipe-cancel-grace needs --pipe")
	}
	if w.http != "" {
		if err := checkHTTPURL(w.http); err != nil {
			return err
		}
	}
	if margin := w.lease / 5; w.pipe != "" && margin > 0 {
		if !graceGiven {
			w.cancelGrace = min(pipeCancelGraceDefault, margin/2)
		}
		if w.cancelGrace <= 0 || w.cancelGrace >= margin {
			return usagef("invalid --pipe-cancel-grace %s: give a positive duration less than --lease-duration/5 (%s), so that a lost slot's events are stopped before a standby may take the slot (default %s)",
				w.cancelGrace, margin, pipeCancelGraceDefault)
		}
	}
	return nil
}

// validateRuns checks --runs and --max-run.
func (w workFlags) validateRuns(maxRunGiven bool) error {
	switch {
	case w.runs && w.exec != "":
		return usagef("--runs needs --http or --pipe: --exec runs a command per event")
	case maxRunGiven && !w.runs:
		return usagef("--max-run needs --runs: give --runs to hand runs of a key's events in one request")
	case w.maxRun < 1:
		return usagef("invalid --max-run %d: give 1 or more events of a key per request (default %d)", w.maxRun, partitionq.MaxRunDefault)
	}
	return nil
}

// checkHTTPURL checks --http: an absolute http or https URL without
// credentials.
func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return usagef("invalid --http %s: give an absolute http or https URL, e.g. --http http://127.0.0.1:8080/events", termsafe.Echo(raw))
	case u.User != nil:
		return usagef("invalid --http: the URL holds credentials, which the command line shows to every user of the machine: take them out and give them in --http-config's file or $%s (docs/handlers.md)", envHTTPToken)
	}
	return nil
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
	running := g.Slots
	if slots != nil {
		running = len(slots)
	}
	handler, closeHandler, err := a.workHandler(t, w, s, running)
	if err != nil {
		return err
	}
	handlerClosed := false
	defer func() {
		if !handlerClosed {
			closeHandler(context.Background())
		}
	}()
	cfg := partitionq.WorkerConfig{
		Queue: t.queue, Group: t.group, Pins: slots,
		Retry: partitionq.RetryConfig{Policy: partitionq.Policy(w.policy), MaxAttempts: w.maxAttempts, BackoffMin: w.backoffMin},
		Limits: partitionq.LimitsConfig{Concurrency: w.concurrency, DrainConcurrency: w.drains, MaxRun: w.maxRun,
			HandlerTimeout: w.handlerTimeout, ShutdownTimeout: w.shutdownTimeout, PollInterval: w.pollInterval,
			LivenessTimeout: w.liveness},
		Ownership:       partitionq.OwnershipConfig{LeaseDuration: w.lease, DeadHostTimeout: w.deadHost},
		DisableProgress: w.noProgress, Identity: w.identity,
	}
	if run, ok := handler.(partitionq.RunHandler); ok && w.runs {
		cfg.Handler = partitionq.Runs(run)
	} else {
		cfg.Handler = handler
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
	closeHandler(stopCtx) // a --pipe process: the end of its input, then its group killed by the stop's bound
	handlerClosed = true
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

// workHandler makes the handler of work: a command per event (--exec), a
// POST per event (--http), or one process for all (--pipe). running is the
// number of slots the worker runs (for the connections --http keeps). The
// returned func ends it, once the worker has stopped, within ctx.
func (a *app) workHandler(t target, w workFlags, s *session, running int) (partitionq.Handler, func(ctx context.Context), error) {
	switch {
	case w.http != "":
		settings, err := loadHTTPSettings(w.httpConfig, w.http, a.env.Getenv)
		if err != nil {
			return nil, nil, err
		}
		drains := w.drains
		if drains == 0 {
			drains = partitionq.DrainConcurrencyDefault
		}
		h, err := partitionq.NewHTTPHandler(httpHandlerConfig(w.http, settings, running*w.concurrency+drains))
		if err != nil {
			return nil, nil, err
		}
		return h, func(context.Context) { h.Close() }, nil
	case w.pipe != "":
		// Up before the first process, so that a worker killed at any
		// moment takes its processes with it.
		if err := startGuardian(); err != nil {
			return nil, nil, err
		}
		h, err := newPipeHandler(w.pipe, pipeEnv(os.Environ(), t.queue, t.group), a.env.Stderr, s.log, w.cancelGrace)
		if err != nil {
			return nil, nil, err
		}
		return h, h.close, nil
	}
	if err := startGuardian(); err != nil {
		return nil, nil, err
	}
	h, err := newExecHandler(w.exec, os.Environ(), a.env.Stdout, a.env.Stderr)
	if err != nil {
		return nil, nil, err
	}
	return h, func(context.Context) { h.close() }, nil
}

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
