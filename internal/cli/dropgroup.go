package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/partitionq/partitionq/partitionq"
)

// dropGroupJSON is the --json output of drop-group (docs/cli.md).
type dropGroupJSON struct {
	Queue   string `json:"queue"`
	Group   string `json:"group"`
	Dropped bool   `json:"dropped"`
}

func (a *app) dropGroupCmd() *cobra.Command {
	var (
		t      target
		force  bool
		reason string
		actor  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "drop-group",
		Short: "Unregister a group's slot consumers (stop its workers first)",
		Long: `Unregister every slot consumer of a group, so that it no longer holds back
the queue's table rotation: for example the old group after a change of N
(docs/operations.md). Refused while a live worker owns a slot, and, without
--force, while events are set aside (blocked keys): --force drops them with
the group. The queue, its other groups and the group's dead letters stay.`,
		Example: "  partitionq drop-group --queue files --group indexer-v1 --reason 'moved to 8 slots'",
		Args:    noWords,
		RunE: a.runFor(&t, func(cmd *cobra.Command, _ []string) error {
			s, err := a.openFor(cmd.Context(), t)
			if err != nil {
				return err
			}
			defer s.close()
			err = s.client.DropGroup(cmd.Context(), partitionq.DropGroupRequest{Queue: t.queue, Group: t.group, Force: force,
				Reason: reason, Actor: a.actorOr(actor)})
			var sa *partitionq.SetAsideError
			if errors.As(err, &sa) {
				return explain(err, "group %q has %s set aside (blocked keys and their waiting events): nothing was dropped; resolve them first "+
					"(partitionq blocked --queue %s --group %s, then skip or quarantine), or add --force to drop them with the group",
					t.group, plural(sa.Count, "event"), t.queue, t.group)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), dropGroupJSON{Queue: t.queue, Group: t.group, Dropped: true})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "dropped group %q of queue %q\n", t.group, t.queue)
			return err
		}),
	}
	f := cmd.Flags()
	t.bind(f)
	f.BoolVar(&force, "force", false, "drop the group even with events set aside (they are dropped too)")
	f.StringVar(&reason, "reason", "", "why, recorded in the audit trail")
	f.StringVar(&actor, "actor", "", "who is acting, recorded in the audit trail (default $USER, else the OS user)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
