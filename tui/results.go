package tui

import (
	"errors"
	"fmt"
	"strings"

	"github.com/partitionq/partitionq/partitionq"
)

// The texts of the result line: what an action is doing, and what the
// library answered.

func pendingText(r actionRequest) string {
	switch r.kind {
	case actReplayMany:
		return "… replaying " + actionTarget(r)
	case actPurgeMany:
		return "… purging " + actionTarget(r)
	case actReplay:
		return fmt.Sprintf("… replaying dead letter %d", r.dead.ID)
	}
	if r.row.Action == partitionq.AuditRetry {
		return fmt.Sprintf("… bringing the retry of key %s forward", line(r.key.Key))
	}
	return fmt.Sprintf("… %s: key %s, event #%d", r.verb(), line(r.key.Key), r.key.Head.ID)
}

// resultFlash says what the library answered to an action.
func resultFlash(msg actionMsg) flash {
	r, k := msg.result, line(msg.req.key.Key)
	if msg.err != nil {
		return flash{sev: sevCrit, text: fmt.Sprintf("✗ %s of %s failed: %s", msg.req.verb(), actionTarget(msg.req), actionErrText(msg.err))}
	}
	if b := msg.bulk; msg.req.kind.bulk() {
		if msg.req.kind == actPurgeMany {
			return flash{sev: sevOK, text: fmt.Sprintf("✓ Purged %s (%s) · audit entry %d", plural(b.Count, "dead letter"), filterText(msg.req), b.AuditID)}
		}
		t := fmt.Sprintf("✓ Replayed %s (%s) in event order", plural(b.Count, "dead letter"), filterText(msg.req))
		if b.AlreadyReplayed > 0 {
			t += fmt.Sprintf("; %d already replayed, left as they were", b.AlreadyReplayed)
		}
		return flash{sev: sevOK, text: fmt.Sprintf("%s · audit entry %d", t, b.AuditID)}
	}
	switch r.Outcome {
	case partitionq.OutcomeSkipped:
		next := "no waiting events"
		if len(r.NextIDs) > 0 {
			ids := make([]string, 0, 3)
			for _, id := range r.NextIDs[:min(3, len(r.NextIDs))] {
				ids = append(ids, fmt.Sprintf("#%d", id))
			}
			next = "next to run: " + strings.Join(ids, ", ")
			if len(r.NextIDs) > 3 {
				next += ", …"
			}
		}
		return flash{sev: sevOK, text: fmt.Sprintf("✓ Skipped event #%d of key %s (now a dead letter); %s", r.EventID, k, next)}
	case partitionq.OutcomeAlreadyResolved:
		return flash{sev: sevWarn, text: fmt.Sprintf("• Already resolved: event #%d of key %s %s; nothing changed", msg.req.key.Head.ID, k, resolvedText(r.Resolved))}
	case partitionq.OutcomeRetryScheduled:
		return flash{sev: sevOK, text: fmt.Sprintf("✓ Retry of event #%d (key %s) brought forward: the worker tries it within a second or so", r.EventID, k)}
	case partitionq.OutcomeQuarantined:
		return flash{sev: sevOK, text: fmt.Sprintf("✓ Quarantined key %s: %s moved to the dead letters", k, plural(r.Count, "event"))}
	}
	if msg.req.kind == actKeyHead && r.Outcome != "" {
		return keyHeadFlash(msg.req, r)
	}
	switch msg.replay.Outcome {
	case partitionq.OutcomeReplayed:
		return flash{sev: sevOK, text: fmt.Sprintf("✓ Replayed dead letter %d as event #%d", msg.req.dead.ID, msg.replay.NewEventID)}
	case partitionq.OutcomeAlreadyReplayed:
		return flash{sev: sevWarn, text: fmt.Sprintf("• Dead letter %d was already replayed (event #%d); nothing changed", msg.req.dead.ID, msg.replay.NewEventID)}
	}
	return flash{sev: sevWarn, text: fmt.Sprintf("%s of %s: outcome %q", msg.req.verb(), actionTarget(msg.req), string(r.Outcome)+string(msg.replay.Outcome))}
}

// keyHeadFlash is the result line of an action on a key's head whose
// outcome the console has no words of its own for: the action's name,
// the event and key, the outcome the library recorded and, when it moved
// more than the head, its count.
func keyHeadFlash(req actionRequest, r partitionq.ActionResult) flash {
	id := r.EventID
	if id == 0 {
		id = req.key.Head.ID
	}
	t := fmt.Sprintf("✓ %s: event #%d of key %s, %s", capital(req.verb()), id, line(req.key.Key), line(string(r.Outcome)))
	if r.Count > 1 {
		t += fmt.Sprintf(" (%s)", plural(r.Count, "event"))
	}
	return flash{sev: sevOK, text: t}
}

// filterText is the selection of a bulk action, for the result line.
func filterText(r actionRequest) string {
	if r.filter == "" {
		return "every one shown"
	}
	return line(r.filter)
}

func actionTarget(r actionRequest) string {
	if r.kind.bulk() {
		return "the dead letters (" + filterText(r) + ")"
	}
	if r.kind == actReplay {
		return fmt.Sprintf("dead letter %d", r.dead.ID)
	}
	return "key " + line(r.key.Key)
}

// resolvedText says how and by whom an event was resolved.
func resolvedText(r *partitionq.Resolution) string {
	switch {
	case r == nil:
		return "was resolved"
	case r.How == partitionq.ResolvedHandled:
		return "was handled by a worker"
	}
	return fmt.Sprintf("was %s by %s at %s (%s)", r.How, line(r.Actor), r.At.Local().Format("15:04:05"), line(r.Reason))
}

func actionErrText(err error) string {
	var (
		nh *partitionq.NotHeadError
		de *partitionq.DrainingError
	)
	switch {
	case errors.As(err, &nh):
		now := fmt.Sprintf("its head is #%d now (%s)", nh.Head, nh.HeadState)
		if nh.Head == 0 {
			now = "the key is not blocked any more"
		}
		return fmt.Sprintf("event #%d is not the head and was never resolved (%s); %s; nothing changed", nh.EventID, line(nh.Why), now)
	case errors.Is(err, partitionq.ErrHeadBusy):
		return "a worker is handling the head right now; try again in a moment"
	case errors.Is(err, partitionq.ErrNotBlocked):
		return "the key is not blocked (any more): nothing of it is set aside and its events run as they arrive; nothing changed (the list drops it at the next refresh)"
	case errors.As(err, &de):
		return "the key is draining: its head never failed; nothing changed"
	}
	return line(err.Error())
}

// drainingRetryFlash answers r on a draining key without asking the
// library: its next event is due already.
func drainingRetryFlash(r actionRequest) flash {
	return flash{sev: sevWarn, text: fmt.Sprintf("• Key %s is draining: its next event #%d never failed and runs as soon as a worker gets to it; nothing to bring forward",
		line(r.key.Key), r.key.Head.ID)}
}
