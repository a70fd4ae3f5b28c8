package tui

import (
	"context"
	"time"

	"github.com/partitionq/partitionq/internal/connstr"

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
	deadAll     bool // replayed ones too
	audit       bool
	previewKey  string // the key whose waiting events to read, if any
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
// only through line and text (safe.go), which apply internal/termsafe's
// rule, so that none can act on the operator's terminal; actions use them
// as they are.
type snapshotMsg struct {
	at      time.Time // when the refresh read the state: views render times relative to it
	status  partitionq.GroupStatus
	blocked []partitionq.BlockedKey
	plan    fetchPlan
	dead    []partitionq.DeadLetter // when plan.deadLetters
	audit   []partitionq.AuditEntry // when plan.audit
	preview []partitionq.PreviewEvent
	// previewErr is the error of the preview read alone (usually
	// ErrNotBlocked: the key was resolved meanwhile); it does not fail the
	// refresh.
	previewErr error
	err        error
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
		msg.at = sh.now()
		return msg
	}
}

// read reads the state the plan asks for into a snapshot of its own.
func read(ctx context.Context, sh *shared, plan fetchPlan) (msg snapshotMsg, err error) {
	if msg.status, err = sh.client.Status(ctx, sh.queue, sh.group); err != nil {
		return snapshotMsg{}, err
	}
	if msg.blocked, err = sh.client.BlockedKeys(ctx, sh.queue, sh.group); err != nil {
		return snapshotMsg{}, err
	}
	if plan.deadLetters {
		q := partitionq.DeadLetterQuery{Queue: sh.queue, Group: sh.group, Limit: deadLetterLimit, Pending: !plan.deadAll}
		if msg.dead, err = sh.client.DeadLetters(ctx, q); err != nil {
			return snapshotMsg{}, err
		}
	}
	if plan.audit {
		if msg.audit, err = sh.client.Audit(ctx, sh.queue, sh.group, auditLimit); err != nil {
			return snapshotMsg{}, err
		}
	}
	if plan.previewKey != "" {
		msg.preview, msg.previewErr = sh.client.Preview(ctx, sh.queue, sh.group, plan.previewKey, PreviewLimit)
	}
	return msg, nil
}

// actionKind names an operator action.
type actionKind int

const (
	actSkip actionKind = iota
	actRetry
	actQuarantine
	actReplay
)

func (k actionKind) verb() string {
	return [...]string{"skip", "retry now", "quarantine", "replay"}[k]
}

// actionRequest is an action an operator asked for: on a blocked key
// (skip, retry now, quarantine) or a dead letter (replay).
type actionRequest struct {
	kind   actionKind
	key    partitionq.BlockedKey // as the operator saw it: its Head.ID guards the action
	dead   partitionq.DeadLetter
	reason string
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
)

func send(msg tea.Msg) tea.Cmd { return func() tea.Msg { return msg } }

// actionMsg is the library's answer to an action.
type actionMsg struct {
	at     time.Time // when it came
	req    actionRequest
	result partitionq.ActionResult // skip, retry now, quarantine
	replay partitionq.ReplayResult // replay
	err    error
}

// act runs an action through the client.
func act(sh *shared, req actionRequest) tea.Cmd {
	return func() tea.Msg {
		msg := actionMsg{req: req}
		a := partitionq.Action{Queue: sh.queue, Group: sh.group, Key: req.key.Key, HeadID: req.key.Head.ID,
			Reason: req.reason, Actor: sh.actor}
		msg.err = sh.call(func(ctx context.Context) error {
			var err error
			switch req.kind {
			case actSkip:
				msg.result, err = sh.client.Skip(ctx, a)
			case actRetry:
				msg.result, err = sh.client.RetryNow(ctx, a)
			case actQuarantine:
				msg.result, err = sh.client.Quarantine(ctx, a)
			case actReplay:
				msg.replay, err = sh.client.Replay(ctx, sh.queue, sh.group, req.dead.ID, req.reason, sh.actor)
			}
			return err
		})
		msg.at = sh.now()
		return msg
	}
}
