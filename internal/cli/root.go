package cli

import (
	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// app holds what every command shares: the outside world and the global
// flags. One app serves one run of Main.
type app struct {
	env      Env
	db       string // --db; defaults to $DATABASE_URL
	engine   string // --engine: "", "pgq" or "pgque"
	logLevel string // --log-level
	// logsOff sends the library's logs nowhere: set by commands that own
	// the terminal (console), whose screen a log line would corrupt.
	logsOff bool
}

func newRoot(env Env) *cobra.Command {
	a := &app{env: env}
	root := &cobra.Command{
		Use:   "partitionq",
		Short: "Consume a PgQ queue in order per key, in parallel across keys",
		Long: `partitionq drives the partitionq library from a shell: set up a queue
and consumer group, send events, run a worker for any language, inspect
slots and blocked keys, and unblock them.

Every command takes the database from --db or DATABASE_URL. The queue
engine (PgQ's schema pgq, or PgQue's pgque) is detected; --engine forces it.

Exit status: 0 done, 1 the operation failed, 2 the command line is wrong.
See docs/cli.md.`,
		Version:       partitionq.Version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetVersionTemplate("partitionq {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: flagError(err)} })

	pf := root.PersistentFlags()
	pf.StringVar(&a.db, "db", "", "PostgreSQL connection URL (default $DATABASE_URL)")
	pf.StringVar(&a.engine, "engine", "", `queue engine schema, "pgq" or "pgque" (default: detected)`)
	pf.StringVar(&a.logLevel, "log-level", "warn", "library log level on standard error: debug, info, warn or error")

	root.AddGroup(
		&cobra.Group{ID: "setup", Title: "Setting up and producing:"},
		&cobra.Group{ID: "work", Title: "Working:"},
		&cobra.Group{ID: "inspect", Title: "Inspecting:"},
		&cobra.Group{ID: "unblock", Title: "Unblocking:"},
		&cobra.Group{ID: "demo", Title: "Trying it out:"},
	)
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	add("setup", a.setupCmd(), a.sendCmd(), a.resizeCmd(), a.dropGroupCmd())
	add("work", a.workCmd(), a.tickCmd())
	add("inspect", a.groupsCmd(), a.statusCmd(), a.keyCmd(), a.keysCmd(), a.blockedCmd(), a.previewCmd(), a.auditCmd(), a.consoleCmd())
	add("unblock", append(a.keyActionCmds(), a.dlqCmd())...)
	add("demo", a.demoCmd())
	root.AddCommand(a.versionCmd())
	return root
}
