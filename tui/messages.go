package tui

import (
	"context"
	"errors"
	"time"

	"github.com/partitionq/partitionq/partitionq/connstr"
	"github.com/partitionq/partitionq/partitionq/dlqfilter"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

// Messages. Every asynchronous result comes back as one of these typed
// messages, errors included; components also ask the root for navigation
// and actions through messages (the intents below).

// tickMsg says a refresh is due. Ticks of an older generation are stale
// (a refresh ran early since) and are dropped.
type tickMsg struct{ gen int }

// fetchPlan says what a refresh reads beyond the status and the blocked
// keys, which it always reads.
type fetchPlan struct {
	deadLetters bool
	deadAll     bool   // replayed ones too
	deadFilter  string // the dead-letter filter expression (partitionq/dlqfilter), if any
	audit       bool
	hotKeys     bool   // the hot keys view shows
	previewKey  string // the key whose waiting events to read, if any
	findKey     string // the key the key view shows, if any
	// groups reads the list of every group instead of one group's state:
	// the console shows that list.
	groups bool
}

// PreviewLimit is how many waiting events the key detail and the skip
// confirmation show.
const PreviewLimit = 10

// deadLetterLimit and auditLimit bound the lists the console reads.
const (
	deadLetterLimit = 500
	auditLimit      = 200
)

// snapshotMsg is the result of one refresh. Its texts are as the library
// returned them: untrusted (keys, types, payloads, errors, reasons, names
// come from tenants, producers, handlers and operators). Views show them
// only through line and text (safe.go), which apply partitionq/termsafe's
// rule, so that none can act on the operator's terminal; actions use them
// as they are.
type snapshotMsg struct {
	at      time.Time // when the refresh read the state: views render times relative to it
	status  partitionq.GroupStatus
	blocked []partitionq.BlockedKey
	plan    fetchPlan
	dead    []partitionq.DeadLetter // when plan.deadLetters
	audit   []partitionq.AuditEntry // when plan.audit
	hot     partitionq.HotKeys      // when plan.hotKeys
	preview []partitionq.PreviewEvent
	// previewErr is the error of the preview read alone (usually
	// ErrNotBlocked: the key was resolved meanwhile); it does not fail the
	// refresh.
	previewErr error
	// queue and group are the group the snapshot is of ("" for the list
	// of groups): one read before the console switched groups is dropped.
	queue, group string
	groups       []partitionq.GroupOverview // when plan.groups
	key          partitionq.KeyInfo         // when plan.findKey
	// keyErr is the error of the key read alone (a key that is not valid);
	// it does not fail the refresh.
	keyErr error
	// deadErr is the error of the dead-letter filter (a filter that does
	// not parse); it does not fail the refresh.
	deadErr error
	err     error
}

// fetch reads the state the plan asks for, as one command: one refresh is
// in flight at a time, and it ends by its deadline (Options.RefreshTimeout)
// even when a read hangs.
func fetch(sh *shared, plan fetchPlan) tea.Cmd {
	return func() tea.Msg {
		msg, err := bounded(sh.ctx, sh.refreshLimit, func(ctx context.Context) (snapshotMsg, error) {
			return read(ctx, sh, plan)
		})
		msg.plan, msg.err = plan, connstr.ConnectCause(err)
		if !plan.groups {
			msg.queue, msg.group = sh.queue, sh.group
		}
		msg.at = sh.now()
		return msg
	}
}

// read reads the state the plan asks for into a snapshot of its own.
func read(ctx context.Context, sh *shared, plan fetchPlan) (msg snapshotMsg, err error) {
	if plan.groups {
		msg.groups, err = sh.client.Groups(ctx, partitionq.GroupsQuery{})
		return msg, err
	}
	if msg.status, err = sh.client.Status(ctx, sh.queue, sh.group); err != nil {
		return snapshotMsg{}, err
	}
	if msg.blocked, err = sh.client.BlockedKeys(ctx, sh.queue, sh.group); err != nil {
		return snapshotMsg{}, err
	}
	if plan.deadLetters {
		q := partitionq.DeadLetterQuery{Queue: sh.queue, Group: sh.group, Limit: deadLetterLimit, Pending: !plan.deadAll}
		if msg.deadErr = dlqfilter.Apply(&q, plan.deadFilter, sh.now()); msg.deadErr == nil {
			if msg.dead, err = sh.client.DeadLetters(ctx, q); err != nil {
				var ve *partitionq.ValidationError
				if !errors.As(err, &ve) {
					return snapshotMsg{}, err
				}
				msg.deadErr = err
			}
		}
	}
	if plan.findKey != "" {
		msg.key, msg.keyErr = sh.client.Key(ctx, sh.queue, sh.group, plan.findKey)
		if msg.keyErr != nil && !isKeyProblem(msg.keyErr) {
			return snapshotMsg{}, msg.keyErr
		}
	}
	if plan.audit {
		if msg.audit, err = sh.client.Audit(ctx, sh.queue, sh.group, auditLimit); err != nil {
			return snapshotMsg{}, err
		}
	}
	if plan.hotKeys {
		if msg.hot, err = sh.client.HotKeys(ctx, sh.queue, sh.group, HotKeysTop); err != nil {
			return snapshotMsg{}, err
		}
	}
	if plan.previewKey != "" {
		msg.preview, msg.previewErr = sh.client.Preview(ctx, sh.queue, sh.group, plan.previewKey, PreviewLimit)
	}
	return msg, nil
}

// actionKind names what an operator action acts on, and how.
type actionKind int

const (
	// actKeyHead: an action on a blocked key's head (Client.Act), the row
	// of partitionq's table in actionRequest.row.
	actKeyHead actionKind = iota
	actReplay
	actReplayMany // the dead letters a filter selects
	actPurgeMany
)

// bulk reports whether k acts on the dead letters a filter selects.
func (k actionKind) bulk() bool { return k == actReplayMany || k == actPurgeMany }

// actionRequest is an action an operator asked for: on a blocked key's
// head (a row of partitionq's table) or on dead letters (replay, purge).
type actionRequest struct {
	kind   actionKind
	row    partitionq.AuditActionInfo // actKeyHead: the action's row
	key    partitionq.BlockedKey      // as the operator saw it: its Head.ID guards the action
	dead   partitionq.DeadLetter
	reason string
	// match selects the dead letters of a bulk action (its filter as the
	// operator typed it in filter; all: no filter, pending or all as shown).
	match  partitionq.DeadLetterQuery
	filter string
}

// keyRequest asks for action row on blocked key b's head.
func keyRequest(row partitionq.AuditActionInfo, b partitionq.BlockedKey) actionRequest {
	return actionRequest{kind: actKeyHead, row: row, key: b}
}

// action is the audit trail's action r records.
func (r actionRequest) action() partitionq.AuditAction {
	switch r.kind {
	case actKeyHead:
		return r.row.Action
	case actPurgeMany:
		return partitionq.AuditPurge
	}
	return partitionq.AuditReplay
}

// verb names r's action in prompts and results ("retry now"): its name in
// partitionq's table of actions.
func (r actionRequest) verb() string {
	if r.kind == actKeyHead && r.row.Name != "" {
		return r.row.Name
	}
	return r.action().Name()
}

// Intents: components ask the root with these.
type (
	// openKeyMsg opens the key detail of a blocked key.
	openKeyMsg struct{ key partitionq.BlockedKey }
	// closeKeyMsg closes the key detail.
	closeKeyMsg struct{}
	// showSlotKeysMsg shows the blocked keys of one slot.
	showSlotKeysMsg struct{ slot int }
	// confirmMsg opens the confirm dialog for an action.
	confirmMsg struct{ req actionRequest }
	// cancelConfirmMsg closes the confirm dialog without acting.
	cancelConfirmMsg struct{}
	// runActionMsg runs an action (confirmed, or one that needs no
	// confirmation such as retry now).
	runActionMsg struct{ req actionRequest }
	// refreshNowMsg asks for a refresh at once (the view's data changed).
	refreshNowMsg struct{}
	// closeFindMsg closes the key view (and its prompt).
	closeFindMsg struct{}
	// openGroupMsg opens one group from the list of groups.
	openGroupMsg struct{ queue, group string }
)

// bulkPreviewMsg is the dry run of a bulk action, for its confirmation.
type bulkPreviewMsg struct {
	req actionRequest
	res partitionq.BulkResult
	err error
}

// bulkRequest is the library's request for a bulk action r.
func (sh *shared) bulkRequest(r actionRequest, dryRun bool) partitionq.BulkRequest {
	q := r.match
	q.Queue, q.Group = sh.queue, sh.group
	return partitionq.BulkRequest{Match: q, All: true, DryRun: dryRun, Reason: r.reason, Actor: sh.actor}
}

// dryRun runs a bulk action as a dry run, for its confirmation.
func dryRun(sh *shared, req actionRequest) tea.Cmd {
	return func() tea.Msg {
		msg := bulkPreviewMsg{req: req}
		msg.err = sh.call(func(ctx context.Context) error {
			var err error
			if req.kind == actReplayMany {
				msg.res, err = sh.client.ReplayMatching(ctx, sh.bulkRequest(req, true))
			} else {
				msg.res, err = sh.client.PurgeMatching(ctx, sh.bulkRequest(req, true))
			}
			return err
		})
		return msg
	}
}

// isKeyProblem reports an error of the key itself (not of the database).
func isKeyProblem(err error) bool {
	var ve *partitionq.ValidationError
	return errors.As(err, &ve)
}

func send(msg tea.Msg) tea.Cmd { return func() tea.Msg { return msg } }

// actionMsg is the library's answer to an action.
type actionMsg struct {
	at     time.Time // when it came
	req    actionRequest
	result partitionq.ActionResult // skip, retry now, quarantine
	replay partitionq.ReplayResult // replay
	bulk   partitionq.BulkResult   // bulk replay, bulk purge
	err    error
}

// act runs an action through the client.
func act(sh *shared, req actionRequest) tea.Cmd {
	return func() tea.Msg {
		msg := actionMsg{req: req}
		a := partitionq.ActionRequest{Action: req.row.Action, Queue: sh.queue, Group: sh.group, Key: req.key.Key, HeadID: req.key.Head.ID,
			Reason: req.reason, Actor: sh.actor}
		msg.err = sh.call(func(ctx context.Context) error {
			var err error
			switch req.kind {
			case actKeyHead:
				msg.result, err = sh.client.Act(ctx, a)
			case actReplay:
				msg.replay, err = sh.client.Replay(ctx, partitionq.ReplayRequest{Queue: sh.queue, Group: sh.group, ID: req.dead.ID, Reason: req.reason, Actor: sh.actor})
			case actReplayMany:
				msg.bulk, err = sh.client.ReplayMatching(ctx, sh.bulkRequest(req, false))
			case actPurgeMany:
				msg.bulk, err = sh.client.PurgeMatching(ctx, sh.bulkRequest(req, false))
			}
			return err
		})
		msg.at = sh.now()
		return msg
	}
}
