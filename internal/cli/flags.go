package cli

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/dlqfilter"
	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// target is the queue and consumer group a command acts on.
type target struct {
	queue, group string
}

// bindQueue adds --queue; bind adds --queue and --group.
func (t *target) bindQueue(fs *pflag.FlagSet) {
	fs.StringVar(&t.queue, "queue", "", "queue name (required)")
}

func (t *target) bind(fs *pflag.FlagSet) {
	t.bindQueue(fs)
	fs.StringVar(&t.group, "group", "", "consumer group name (required)")
}

// bindOptional binds --queue and --group for a command that takes both or
// neither (the console: neither is the list of every group).
func (t *target) bindOptional(fs *pflag.FlagSet, neither string) {
	fs.StringVar(&t.queue, "queue", "", "queue name (with --group; without both: "+neither+")")
	fs.StringVar(&t.group, "group", "", "consumer group name (with --queue; without both: "+neither+")")
}

func (t target) needQueue() error {
	if err := need("queue", t.queue, "name the queue, e.g. --queue files"); err != nil {
		return err
	}
	return partitionq.ValidateQueueName(t.queue)
}

func (t target) need() error {
	if err := t.needQueue(); err != nil {
		return err
	}
	if err := need("group", t.group, "name the consumer group, e.g. --group indexer"); err != nil {
		return err
	}
	return partitionq.ValidateGroupName(t.group)
}

// need fails with a usage error when a required flag is empty.
func need(flag, value, hint string) error {
	if value == "" {
		return usagef("missing --%s: %s", flag, hint)
	}
	return nil
}

// actorFlags are who acts and why, for operator actions.
type actorFlags struct {
	actor, reason string
}

// bind binds --actor and --reason; reason says where the reason goes
// (each action records it in its own places).
func (f *actorFlags) bind(fs *pflag.FlagSet, reason string) {
	fs.StringVar(&f.actor, "actor", "", "who is acting, recorded in the audit trail (default $USER, else the OS user)")
	fs.StringVar(&f.reason, "reason", "", reason)
}

// actorOr is the actor recorded for an action: the one given, else $USER,
// else the name of the OS user running the command.
func (a *app) actorOr(given string) string {
	if given != "" {
		return given
	}
	if u := a.env.Getenv("USER"); u != "" {
		return u
	}
	return osUser()
}

// parseSlots reads --slots: "all", or a list of slots and ranges such as
// "0,2,5-7", each below n.
func parseSlots(s string, n int) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	bad := func(part, problem string) error {
		what := termsafe.Echo(part)
		if part == s {
			what = "it"
		}
		return usagef(`invalid --slots %s: %s %s: use "all" or a list such as 0,2,5-7 of slots 0 to %d`, termsafe.Echo(s), what, problem, n-1)
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		from, err1 := strconv.Atoi(lo)
		to := from
		var err2 error
		if isRange {
			to, err2 = strconv.Atoi(hi)
		}
		switch {
		case err1 != nil || err2 != nil:
			return nil, bad(part, "is not a slot number or range")
		case from > to:
			return nil, bad(part, "is an empty range")
		case from < 0 || to >= n:
			return nil, bad(part, fmt.Sprintf("is outside the group's %s", plural(int64(n), "slot")))
		}
		for i := from; i <= to; i++ {
			seen[i] = true
		}
	}
	out := make([]int, 0, len(seen))
	for i := range seen {
		out = append(out, i)
	}
	sort.Ints(out)
	return out, nil
}

// parseBefore reads --before: an RFC 3339 time, a date (local midnight), or
// a duration meaning that long ago.
func parseBefore(s string, now time.Time) (time.Time, error) {
	return parseTimeFlag("before", s, now)
}

// parseTimeFlag reads a time flag (see dlqfilter.ParseTime); "" is the zero time.
func parseTimeFlag(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := dlqfilter.ParseTime(s, now)
	if err != nil {
		return time.Time{}, usagef("invalid --%s %s: %v", flag, termsafe.Echo(s), err)
	}
	return t, nil
}

// dlqFilterFlags select dead letters: dlq list, replay and purge share them.
type dlqFilterFlags struct {
	key, typ, errText, reason, since, before string
	pending                                  bool
	ids                                      []int64
	filters                                  []string
}

func (f *dlqFilterFlags) bind(fs *pflag.FlagSet, idHelp string) {
	fs.StringVar(&f.key, "key", "", "only the dead letters of this key")
	fs.StringVar(&f.typ, "type", "", "only those of this event type")
	fs.StringVar(&f.errText, "error", "", "only those whose last error contains this text (ignoring case)")
	fs.StringVar(&f.reason, "dead-reason", "", `only those whose reason starts with this: max_attempts, handler, skip, quarantine`)
	fs.StringVar(&f.since, "since", "", "only those that died at or after this time or age (2024-05-01, 24h)")
	fs.StringVar(&f.before, "before", "", "only those that died before this time or age")
	fs.BoolVar(&f.pending, "pending", false, "only those not replayed")
	fs.Int64SliceVar(&f.ids, "id", nil, idHelp)
	fs.StringArrayVar(&f.filters, "filter", nil, "a filter expression (repeatable): "+dlqfilter.Fields)
}

// set reports whether any filter flag was given.
func (f *dlqFilterFlags) set() bool {
	return f.key != "" || f.typ != "" || f.errText != "" || f.reason != "" || f.since != "" || f.before != "" || f.pending ||
		len(f.ids) > 0 || len(f.filters) > 0
}

// apply narrows q with the flags: --filter expressions first, then the
// single flags.
func (f *dlqFilterFlags) apply(q *partitionq.DeadLetterQuery, now time.Time) error {
	for _, expr := range f.filters {
		if err := dlqfilter.Apply(q, expr, now); err != nil {
			return usagef("invalid --filter: %v", err)
		}
	}
	for _, id := range f.ids {
		if id < 1 {
			return usagef("invalid --id %d: give the ID shown by partitionq dlq list", id)
		}
	}
	q.IDs = append(q.IDs, f.ids...)
	for _, s := range []struct {
		dst *string
		v   string
	}{{&q.Key, f.key}, {&q.Type, f.typ}, {&q.Error, f.errText}, {&q.Reason, f.reason}} {
		if s.v != "" {
			*s.dst = s.v
		}
	}
	q.Pending = q.Pending || f.pending
	var err error
	if f.since != "" {
		if q.DeadAfter, err = parseTimeFlag("since", f.since, now); err != nil {
			return err
		}
	}
	if f.before != "" {
		if q.DeadBefore, err = parseTimeFlag("before", f.before, now); err != nil {
			return err
		}
	}
	if !q.DeadAfter.IsZero() && !q.DeadBefore.IsZero() && !q.DeadAfter.Before(q.DeadBefore) {
		return usagef("--since %s is not before --before %s: nothing could match; give a range whose start comes first",
			q.DeadAfter.Format(time.RFC3339), q.DeadBefore.Format(time.RFC3339))
	}
	return nil
}

// exactArgs wants n positional arguments, named for the message.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s wants %s, got %d arguments", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}

// noWords is cobra.NoArgs told in the command line's words: the command
// takes flags, here is how (its first example; for setup, the very
// command the words seem to mean).
func noWords(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = termsafe.Echo(a)
	}
	hint := strings.TrimSpace(strings.SplitN(cmd.Example, "\n", 2)[0])
	if cmd.Name() == "setup" && len(args) == 3 {
		hint = fmt.Sprintf("partitionq setup --queue %s --group %s --slots %s", termsafe.Echo(args[0]), termsafe.Echo(args[1]), termsafe.Echo(args[2]))
	}
	if hint != "" {
		hint = ", e.g. " + hint
	}
	return usagef("%s takes flags, not words (got %s): give them as flags%s", cmd.CommandPath(), strings.Join(quoted, " "), hint)
}
