package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/internal/demo"
	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/partitionq/termsafe"
	"github.com/partitionq/partitionq/tui"
)

// demoFlags are the flags of demo.
type demoFlags struct {
	tenants     int
	rate        float64
	slots       int
	concurrency int
	failRate    float64
	maxAttempts int
	duration    time.Duration
	noConsole   bool
	inPlace     bool
	demoDB      string
	queue       string
}

// demoGroup is the consumer group the demo sets up.
const demoGroup = "storage"

// demoDBMarker is the comment of a database made by the demo. The demo drops
// and makes again only a database that carries it.
const demoDBMarker = "partitionq demo: dropped and made again by every run of partitionq demo"

func (a *app) demoCmd() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a multi-tenant storage service in miniature, in the console",
		Long: `Run a multi-tenant storage service in miniature: a producer sends
FileCreated, FileOverwritten and FileDeleted events for --tenants tenants
(the tenant is the partition key), a worker with --slots slots handles
them, and a few events fail so that tenants block and unblock. The console
opens on it (q ends the demo); without a terminal, or with --no-console, a
progress line is printed every second instead.

When it ends, the producer stops, the demo waits until every event is
handled or dead, and it checks (internal/ordercheck) that every tenant's
events were handled in order. Exit status 1 if the check fails.

The demo makes its own database, --demo-db, on the server of --db or
DATABASE_URL (dropping the one an earlier run made), with the PgQ
extension, or with --engine pgque PgQue from the SQL file named by
PARTITIONQ_PGQUE_SQL. With --in-place it runs in the --db database
itself, which must have PgQ or PgQue, on a new queue --queue. 'make demo' brings up a
PostgreSQL server with PgQ first (scripts/devdb.sh).`,
		Example: `  partitionq demo
  partitionq demo --tenants 20 --rate 50 --slots 2 --fail-rate 0.05
  partitionq demo --no-console --duration 30s`,
		Args: noWords,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(); err != nil {
				return err
			}
			return a.demo(cmd, f)
		}),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.tenants, "tenants", demo.TenantsDefault, "number of tenants (partition keys)")
	fs.Float64Var(&f.rate, "rate", demo.RateDefault, "events sent per second, on average")
	fs.IntVar(&f.slots, "slots", demo.SlotsDefault, "the group's number of slots N")
	fs.IntVar(&f.concurrency, "concurrency", demo.ConcurrencyDefault, "tenants handled at once per slot")
	fs.Float64Var(&f.failRate, "fail-rate", demo.FailRateDefault, "share of events whose handler fails at least once (0 to 0.5); 1 in 10 of them never succeeds")
	fs.IntVar(&f.maxAttempts, "max-attempts", demo.MaxAttemptsDefault, "tries before a failing event becomes a dead letter (at least 1)")
	fs.DurationVar(&f.duration, "duration", 0, "stop after this long (default: when you quit the console, or on Ctrl-C)")
	fs.BoolVar(&f.noConsole, "no-console", false, "print progress lines instead of opening the console (the default without a terminal)")
	fs.BoolVar(&f.inPlace, "in-place", false, "run in the --db database itself (it must have PgQ or PgQue) instead of making --demo-db")
	fs.StringVar(&f.demoDB, "demo-db", "partitionq_demo", "the database the demo makes (and drops first, if an earlier demo made it)")
	fs.StringVar(&f.queue, "queue", "files", "the queue the demo creates; it must not exist")
	return cmd
}

func (f demoFlags) validate() error {
	switch {
	case f.tenants < 1 || f.tenants > 100_000:
		return usagef("invalid --tenants %d: give 1 to 100000", f.tenants)
	case f.rate <= 0 || f.rate > 100_000:
		return usagef("invalid --rate %g: give events per second, above 0 and at most 100000", f.rate)
	case f.slots < 1 || f.slots > partitionq.MaxSlots:
		return usagef("invalid --slots %d: give 1 to %d", f.slots, partitionq.MaxSlots)
	case f.concurrency < 1 || f.concurrency > 4096:
		return usagef("invalid --concurrency %d: give 1 to 4096", f.concurrency)
	case f.failRate < 0 || f.failRate > 0.5:
		return usagef("invalid --fail-rate %g: give a share from 0 (no failures) to 0.5", f.failRate)
	case f.maxAttempts < 1 || f.maxAttempts > 100:
		return usagef("invalid --max-attempts %d: give 1 to 100 (the demo needs every event to end handled or dead)", f.maxAttempts)
	case f.duration < 0:
		return usagef("invalid --duration %s: give a positive duration, or leave it out", f.duration)
	case !f.inPlace && !validDBName(f.demoDB):
		return usagef("invalid --demo-db %s: use 1 to 63 lower-case letters, digits and '_', starting with a letter", termsafe.Echo(f.demoDB))
	}
	return partitionq.ValidateQueueName(f.queue)
}

func validDBName(s string) bool {
	if s == "" || len(s) > 63 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

func (f demoFlags) config() demo.Config {
	cfg := demo.Config{Queue: f.queue, Group: demoGroup, Tenants: f.tenants, Rate: f.rate, Slots: f.slots,
		Concurrency: f.concurrency, FailRate: f.failRate, MaxAttempts: f.maxAttempts}
	if f.failRate == 0 {
		cfg.FailRate = -1 // none (0 would mean the default)
	}
	return cfg.WithDefaults()
}

// demoRun is one run of the demo command.
type demoRun struct {
	a       *app
	f       demoFlags
	out     io.Writer
	console bool
	where   string // the database, for messages
	hintDB  string // --db for the hints printed at the end ("" for DATABASE_URL)
	d       *demo.Demo
}

func (a *app) demo(cmd *cobra.Command, f demoFlags) error {
	ctx := cmd.Context()
	connStr, err := a.connString()
	if err != nil {
		return usagef("no database: pass --db URL or set DATABASE_URL to a PostgreSQL server with PgQ (or run make demo, which brings one up)")
	}
	var eng freshdb.Engine
	if !f.inPlace {
		var err error
		if eng, err = a.demoEngine(); err != nil {
			return err
		}
	}
	level, err := parseLogLevel(a.logLevel)
	if err != nil {
		return err
	}
	cfg, err := poolConfig(connStr, "partitionq-demo")
	if err != nil {
		return err
	}
	r := &demoRun{a: a, f: f, out: a.env.Stdout, console: !f.noConsole && a.hasTerminal()}
	if f.inPlace {
		r.where = describeDB(cfg)
	} else {
		if cfg.ConnConfig.Database == f.demoDB {
			return usagef("--db names the database %q, which is also --demo-db: the demo drops and makes --demo-db again; point --db at another database of the server (such as postgres), or use --in-place", f.demoDB)
		}
		if err := makeDemoDB(ctx, cfg.ConnConfig, f.demoDB, eng); err != nil {
			return err
		}
		cfg.ConnConfig.Database = f.demoDB
		r.where = describeDB(cfg) + " (made for this run, kept afterwards)"
		r.hintDB = demoHintDB(connStr, f.demoDB)
	}

	dcfg := f.config()
	if c, _ := connstr.Parse(connStr); c != nil {
		if _, ok := c.Get("pool_max_conns"); !ok {
			cfg.MaxConns = max(cfg.MaxConns, int32(demo.PoolSize))
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to the database: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return connectFailed(ctx, cfg.ConnConfig, err)
	}
	// The library logs each handler failure; the demo fails on purpose, so
	// its logs are shown only when asked for with --log-level (and never
	// while the console owns the terminal).
	logOut := io.Discard
	if cmd.Flags().Changed("log-level") && !r.console {
		logOut = a.env.Stderr
	}
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: a.engine,
		Logger: slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level})), Actor: a.actorOr("")})
	if err != nil {
		return err
	}
	if r.d, err = demo.New(client, dcfg); err != nil {
		return err
	}
	if err := r.d.Setup(ctx); err != nil {
		if errors.Is(err, demo.ErrQueueExists) {
			return fmt.Errorf("%w (--queue), or leave out --in-place to let the demo make a database of its own", err)
		}
		return err
	}
	return r.run(ctx)
}

// hasTerminal reports whether the demo may open the console: standard
// input and output are the process's own, and both are terminals.
func (a *app) hasTerminal() bool {
	out := a.env.Stdout
	if lw, ok := out.(*lockedWriter); ok {
		out = lw.w
	}
	return a.env.Stdin == os.Stdin && out == os.Stdout &&
		term.IsTerminal(os.Stdin.Fd()) && term.IsTerminal(os.Stdout.Fd())
}

// demoHintDB is the connection string of the demo's database, for the
// commands the demo suggests at its end: the user's own (its form, sslmode
// and the rest kept) with the password hidden, shell-quoted when it must be.
func demoHintDB(connStr, demoDB string) string {
	c, err := connstr.Parse(connStr)
	if err != nil {
		return demoDB
	}
	c.Set("dbname", demoDB)
	s := c.Redacted()
	if strings.ContainsAny(s, " '\"$&;|<>()*?[]#~`!{}") {
		s = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return s
}

// makeDemoDB drops the database name if an earlier demo made it, makes it
// again, and installs the engine in it (internal/freshdb). It never drops a
// database the demo did not make. ctx governs the whole call.
func makeDemoDB(ctx context.Context, admin *pgx.ConnConfig, name string, eng freshdb.Engine) error {
	conn, err := pgx.ConnectConfig(ctx, admin.Copy())
	if err != nil {
		return connectFailed(ctx, admin, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var comment *string
	err = conn.QueryRow(ctx, `select shobj_description(oid, 'pg_database') from pg_database where datname = $1`, name).Scan(&comment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return err
	case comment == nil || *comment != demoDBMarker:
		return fmt.Errorf("the database %q exists and was not made by partitionq demo, so the demo leaves it alone: pass --demo-db with another name, or --in-place to run in the --db database", name)
	default:
		if err := freshdb.Drop(ctx, admin, name); err != nil {
			return fmt.Errorf("drop the database %q an earlier demo made: %w", name, err)
		}
	}
	_, err = freshdb.Create(ctx, admin, freshdb.Spec{Name: name, Engine: eng, Comment: demoDBMarker})
	var fe *freshdb.Error
	if !errors.As(err, &fe) {
		return err
	}
	switch st := fe.SQLState(); {
	case fe.Step == freshdb.StepCreate && st == "42501":
		return fmt.Errorf("the role %q may not create databases (%w): connect as a role with CREATEDB, or use --in-place to run in the --db database", admin.User, err)
	case fe.Step == freshdb.StepInstall && eng.Name == freshdb.PgQ && (st == "0A000" || st == "58P01"):
		return fmt.Errorf("the server has no PgQ extension (%w): install it (Debian: apt-get install postgresql-<major>-pgq3; scripts/devdb.sh does), or run the demo --in-place in a database that has PgQ or PgQue", err)
	case fe.Step == freshdb.StepInstall && st == "42501":
		return fmt.Errorf("the role %q may not install %s (%w): connect as a superuser, or run the demo --in-place in a database that has PgQ or PgQue", admin.User, eng, err)
	}
	return err
}

// run starts the demo, shows it (console or progress lines) until the user
// or --duration ends it, then lets the last events resolve and checks order.
func (r *demoRun) run(ctx context.Context) error {
	r.intro()
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if r.f.duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, r.f.duration)
	}
	defer cancel()
	if err := r.d.Start(runCtx); err != nil {
		return err
	}
	defer func() {
		// On the paths that return early; the normal one stops it below.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		r.d.Stop(stopCtx) // an error is already being returned
	}()

	var viewErr error
	if r.console {
		// The console closes if the producer stops on an error (the
		// database went away): the error is reported below.
		viewCtx, closeView := context.WithCancel(runCtx)
		go func() {
			select {
			case <-r.d.ProducerDone():
				closeView()
			case <-viewCtx.Done():
			}
		}()
		viewErr = tui.Run(viewCtx, r.d.Client(), tui.Options{Queue: r.f.queue, Group: demoGroup, Actor: r.a.actorOr("")})
		closeView()
	} else {
		r.progress(runCtx)
	}
	prodErr := r.d.StopProducing()
	if viewErr != nil {
		return viewErr
	}
	if prodErr != nil {
		return prodErr
	}

	p, _ := r.d.Progress(context.WithoutCancel(ctx))
	fmt.Fprintf(r.out, "\nthe producer stopped after %s; waiting until every event is handled or dead...\n", fmtDur(p.Elapsed))
	// Ctrl-C cuts the wait short, unless Ctrl-C is what ended the run:
	// then a second one kills the process.
	waitCtx := ctx
	if ctx.Err() != nil {
		waitCtx = context.WithoutCancel(ctx)
	}
	var lastLeft int64
	var lastAt time.Time
	waitErr := r.d.WaitResolved(waitCtx, time.Second, func(p demo.Progress, left int64) {
		if left == lastLeft && time.Since(lastAt) < 5*time.Second {
			return
		}
		lastLeft, lastAt = left, time.Now()
		line := fmt.Sprintf("%7s  %s left", fmtDur(p.Elapsed.Truncate(time.Second)), plural(left, "event"))
		if p.BlockedKeys > 0 {
			line += fmt.Sprintf(", %s blocked (each until its head succeeds, runs out of attempts, or is skipped)", plural(int64(p.BlockedKeys), "tenant"))
		}
		fmt.Fprintln(r.out, line)
	})
	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelStop()
	if err := r.d.Stop(stopCtx); err != nil {
		return fmt.Errorf("the demo's worker did not stop in time: %w", err)
	}
	res, err := r.d.Check(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	return r.report(res, waitErr)
}

// intro says what runs where.
func (r *demoRun) intro() {
	cfg := r.d.Config()
	keys := r.d.Tenants()
	w := r.out
	fmt.Fprintf(w, "partitionq demo: a multi-tenant storage service in miniature\n\n")
	fmt.Fprintf(w, "  producer  %d tenants (%s ... %s; the tenant is the partition key) send\n", cfg.Tenants, keys[0], keys[len(keys)-1])
	fmt.Fprintf(w, "            FileCreated, FileOverwritten and FileDeleted events, ~%g a second\n", cfg.Rate)
	if cfg.BurstEvery > 0 {
		fmt.Fprintf(w, "            (every %s one tenant uploads a folder: %d events of one key at once)\n", cfg.BurstEvery, demo.BurstSize(cfg.Rate))
	}
	fmt.Fprintf(w, "  worker    group %q on queue %q: %d slots, up to %d tenants at once per slot\n", cfg.Group, cfg.Queue, cfg.Slots, cfg.Concurrency)
	if cfg.FailRate > 0 {
		fmt.Fprintf(w, "  failures  %g%% of events fail: most succeed on a retry; 1 in %d is a corrupt file\n", 100*cfg.FailRate, int(1/demo.PoisonShare))
		fmt.Fprintf(w, "            that blocks its tenant until attempt %d fails (a dead letter) or you skip it\n", cfg.MaxAttempts)
	} else {
		fmt.Fprintf(w, "  failures  none (--fail-rate 0)\n")
	}
	fmt.Fprintf(w, "  database  %s\n\n", r.where)
	if r.console {
		fmt.Fprintf(w, "opening the console: 2 lists the blocked tenants, s skips the selected one's head, q ends the demo\n")
		return
	}
	how := "stop with Ctrl-C"
	if r.f.duration > 0 {
		how = "for " + r.f.duration.String()
	}
	why := "no terminal"
	if r.f.noConsole {
		why = "--no-console"
	}
	fmt.Fprintf(w, "%s: a progress line every second instead of the console; %s\n\n", why, how)
}

// progress prints a line every second until ctx ends or the producer stops.
func (r *demoRun) progress(ctx context.Context) {
	fmt.Fprintf(r.out, "%7s %8s %8s %7s %8s %8s %6s %8s\n", "TIME", "SENT", "HANDLED", "FAILED", "BLOCKED", "WAITING", "DEAD", "MAX LAG")
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.d.ProducerDone():
			return
		case <-t.C:
		}
		p, err := r.d.Progress(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(r.out, "(status failed: %v)\n", err)
			}
			continue
		}
		fmt.Fprintf(r.out, "%7s %8d %8d %7d %8d %8d %6d %8s\n", fmtDur(p.Elapsed.Truncate(time.Second)), p.Sent, p.Handled,
			p.Failures, p.BlockedKeys, p.Waiting, p.DeadLetters, fmtDur(p.MaxLag))
	}
}

// report prints the verdict and returns an error unless the run was clean.
func (r *demoRun) report(res demo.Result, waitErr error) error {
	w := r.out
	var dead []string
	for _, k := range []string{"attempts", "skipped", "quarantined", "other"} {
		if n := res.DeadBy[k]; n > 0 {
			label := map[string]string{"attempts": "out of attempts", "skipped": "skipped", "quarantined": "quarantined", "other": "other"}[k]
			dead = append(dead, fmt.Sprintf("%d %s", n, label))
		}
	}
	deadText := ""
	if len(dead) > 0 {
		deadText = " (" + strings.Join(dead, ", ") + ")"
	}
	fmt.Fprintf(w, "\n%d tenants sent %s: %d handled, %s%s\n", res.Tenants, plural(int64(res.Sent), "event"),
		res.Handled, plural(int64(res.Dead), "dead letter"), deadText)
	rp := res.Replays
	if rp.Replays > 0 {
		fmt.Fprintf(w, "%s of dead letters sent again: %d handled, %s again\n", plural(int64(rp.Replays), "replay"), rp.Handled, plural(int64(rp.Dead), "dead letter"))
	}
	checked := fmt.Sprintf("internal/ordercheck over %s, %d of them failures: %d lost, %d order violations, %d repeats",
		plural(int64(res.Calls), "handler call"), res.Failures, res.Lost, res.Violations, res.Repeats)
	if rp.Replays > 0 {
		checked += fmt.Sprintf(";\n   replays at the tail of their tenants: %d lost, %d order violations, %d repeats", rp.Lost, rp.Violations, rp.Repeats)
	}
	lost, violations := res.Lost+rp.Lost, res.Violations+rp.Violations
	var err error
	switch {
	case violations == 0 && waitErr != nil:
		fmt.Fprintf(w, "order check: INCOMPLETE: %s not resolved when the demo stopped waiting (%v); they are not lost, they wait in the queue. No order violation among the rest\n  (%s)\n",
			plural(int64(lost), "event"), waitErr, checked)
		err = fmt.Errorf("%s not resolved: see partitionq blocked", plural(int64(lost), "event"))
	case res.OK():
		fmt.Fprintf(w, "order check: OK: every tenant's events were handled in order\n  (%s)\n", checked)
	default:
		fmt.Fprintf(w, "order check: FAILED\n  (%s)\n", checked)
		for _, ex := range append(res.Examples, rp.Examples...) {
			fmt.Fprintf(w, "  %s\n", ex)
		}
		err = errors.New("the order check failed: see above")
	}
	db := ""
	if r.hintDB != "" {
		db = " --db " + r.hintDB
		fmt.Fprintf(w, "\nthe database %s stays for you to look around (the next demo makes it again;\nfrom a clone, partitionq is: go run ./cmd/partitionq):\n", r.f.demoDB)
	} else {
		fmt.Fprintf(w, "\nqueue %q stays in the database for you to look around (from a clone,\npartitionq is: go run ./cmd/partitionq):\n", r.f.queue)
	}
	fmt.Fprintf(w, "  partitionq dlq list%s --queue %s --group %s\n", db, r.f.queue, demoGroup)
	fmt.Fprintf(w, "  partitionq audit%s --queue %s --group %s\n", db, r.f.queue, demoGroup)
	return err
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}

// demoEngine is the engine the demo installs in the database it makes:
// PgQ, or with --engine pgque PgQue from the file PARTITIONQ_PGQUE_SQL names.
func (a *app) demoEngine() (freshdb.Engine, error) {
	if a.engine != freshdb.PgQue {
		return freshdb.Engine{Name: freshdb.PgQ}, nil
	}
	eng, err := freshdb.New(freshdb.PgQue, a.env.Getenv(freshdb.EnvPgQueSQL))
	if err != nil {
		return freshdb.Engine{}, usagef("--engine pgque: the demo installs PgQue in the database it makes: %v; or run it --in-place in a database that has PgQue", err)
	}
	return eng, nil
}
