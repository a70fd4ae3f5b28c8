package partitionq

import "github.com/partitionq/partitionq/partitionq/internal/parked"

// AuditAction is an action the audit trail records (AuditEntry.Action):
// one of the constants below, each a row of AuditActions. Its value is the
// name the database records and the CLI's audit output shows ("skip",
// "drop_group"); converting it to a string gives that name.
type AuditAction string

// The actions of the audit trail.
const (
	// AuditSkip (Client.Act) moves the blocked head of a key to the dead
	// letters and unblocks the key, whose waiting events then run in
	// order. It needs a reason.
	AuditSkip AuditAction = "skip"
	// AuditRetry (Client.Act, "retry now") brings the next attempt of a
	// blocked key's head forward to now; a running worker tries it within
	// its HeadScanInterval. On a draining key whose head is named
	// (ActionRequest.HeadID), nothing changes but the audit trail: that
	// event is due already.
	AuditRetry AuditAction = "retry"
	// AuditQuarantine (Client.Act) moves the blocked head of a key and
	// every event waiting behind it to the dead letters in one transaction
	// (for a tenant being deleted, or a key known to be broken). Events of
	// the key still in the stream are handled as usual when they arrive.
	// It needs a reason.
	AuditQuarantine AuditAction = "quarantine"
	// AuditReplay: Client.Replay or Client.ReplayMatching sent dead letters again.
	AuditReplay AuditAction = "replay"
	// AuditPurge: Client.PurgeMatching deleted dead letters.
	AuditPurge AuditAction = "purge"
	// AuditResize: Client.Resize started a resize, Client.AbortResize
	// aborted one, or a worker completed one (actor "worker").
	AuditResize AuditAction = "resize"
	// AuditDropGroup: Client.DropGroup dropped a consumer group.
	AuditDropGroup AuditAction = "drop_group"
)

// ActionTarget says what an operator action acts on (AuditActionInfo.On).
type ActionTarget string

// What operator actions act on.
const (
	// TargetKeyHead: a key's head event (Client.Act).
	TargetKeyHead ActionTarget = "key_head"
	// TargetDeadLetter: one dead letter, or (the bulk form) the dead
	// letters a filter selects.
	TargetDeadLetter ActionTarget = "dead_letter"
	// TargetGroup: a consumer group.
	TargetGroup ActionTarget = "group"
)

// AuditActionInfo is a row of AuditActions: an action of the audit trail,
// the words that name it, the outcomes it records, and what the CLI and
// the console need to offer it. The CLI makes one command per row whose
// On is TargetKeyHead; the console offers each row's Key and BulkKey.
type AuditActionInfo struct {
	Action AuditAction
	// Name is the action in prose and in the console's prompts: "retry
	// now" for AuditRetry, else the action itself ("drop_group": "drop
	// group").
	Name string
	// Command is the partitionq command that does it ("dlq replay"); ""
	// for none.
	Command string
	// Summary is the action in one line: the short help of its command.
	Summary string
	// On is what the action acts on.
	On ActionTarget
	// ReasonRequired: the action moves events to the dead letters, so the
	// operator must say why: Client.Act refuses an empty
	// ActionRequest.Reason with a *ValidationError for "reason", the CLI
	// asks for --reason, the console for a reason.
	ReasonRequired bool
	// Confirm: the console asks before it acts.
	Confirm bool
	// Resolves: an action on a key's head that resolves the head, so that
	// the key leaves the blocked keys (skip and quarantine do; retry now
	// does not: the head stays until a worker handles it). The console
	// drops the key from its list and closes its detail when it succeeds.
	Resolves bool
	// PreviewWaiting: an action on a key's head whose confirmation lists
	// the key's waiting events (Client.Preview), because they run next or
	// go to the dead letters with the head (skip, quarantine).
	PreviewWaiting bool
	// Key is the console's key for the action on the selected item (a
	// blocked key, a dead letter); "" for none.
	Key string
	// BulkKey is the console's key for the action on every item its view
	// shows (the dead letters its filter selects); "" for none.
	BulkKey string
	// Outcomes lists what the audit trail says for this action
	// (AuditEntry.OutcomeText: its Outcome and Detail): the
	// Outcome values it records as they are, and the patterns of its
	// free-text outcomes ("purged N (filter)": N a count; the parentheses
	// only when there is something to say in them, each part only when
	// there is: the filter as DeadLetterQuery.Describe says it).
	Outcomes []string

	kind parked.Kind // TargetKeyHead: what the parked package does
}

// auditActions is the one table of the audit trail's actions. Adding an
// operator action on a key is a row here (with its parked.Kind), its body
// in the parked package, and its docs (docs/architecture.md).
var auditActions = []AuditActionInfo{
	{Action: AuditSkip, Name: "skip", Command: "skip", On: TargetKeyHead, kind: parked.Skip,
		Summary:        "Move a blocked key's head event to the dead letters; its waiting events run next",
		ReasonRequired: true, Confirm: true, Resolves: true, PreviewWaiting: true, Key: "s",
		Outcomes: []string{string(OutcomeSkipped), string(OutcomeAlreadyResolved)}},
	{Action: AuditRetry, Name: "retry now", Command: "retry", On: TargetKeyHead, kind: parked.RetryNow,
		Summary:  "Retry a blocked key's head event now, without waiting for its backoff",
		Key:      "r",
		Outcomes: []string{string(OutcomeRetryScheduled), string(OutcomeAlreadyResolved)}},
	{Action: AuditQuarantine, Name: "quarantine", Command: "quarantine", On: TargetKeyHead, kind: parked.Quarantine,
		Summary:        "Move a blocked key's head and all its waiting events to the dead letters",
		ReasonRequired: true, Confirm: true, Resolves: true, PreviewWaiting: true, Key: "Q",
		Outcomes: []string{string(OutcomeQuarantined), string(OutcomeAlreadyResolved)}},
	{Action: AuditReplay, Name: "replay", Command: "dlq replay", On: TargetDeadLetter,
		Summary: "Send dead letters again",
		Confirm: true, Key: "r", BulkKey: "R",
		Outcomes: []string{string(OutcomeReplayed), string(OutcomeAlreadyReplayed), "replayed N (already_replayed M, filter)"}},
	{Action: AuditPurge, Name: "purge", Command: "dlq purge", On: TargetDeadLetter,
		Summary: "Delete dead letters",
		Confirm: true, BulkKey: "P",
		Outcomes: []string{"purged N (filter)"}},
	{Action: AuditResize, Name: "resize", Command: "resize", On: TargetGroup,
		Summary:  "Change a group's number of slots",
		Outcomes: []string{"started: A to B slots (generation G)", "completed: A to B slots (generation G)", "aborted: A to B slots"}},
	{Action: AuditDropGroup, Name: "drop group", Command: "drop-group", On: TargetGroup,
		Summary:  "Drop a consumer group",
		Outcomes: []string{"dropped N slots, M events set aside dropped"}},
}

// AuditActions returns the table of the actions the audit trail records,
// one row each, in the order above (the operator's actions on a key
// first); a copy, the caller's to change.
func AuditActions() []AuditActionInfo {
	out := make([]AuditActionInfo, len(auditActions))
	for i, a := range auditActions {
		a.Outcomes = append([]string(nil), a.Outcomes...)
		out[i] = a
	}
	return out
}

// Info returns a's row of AuditActions; false for an action the table
// does not list (an entry written by a later version of partitionq).
func (a AuditAction) Info() (AuditActionInfo, bool) {
	for _, r := range auditActions {
		if r.Action == a {
			r.Outcomes = append([]string(nil), r.Outcomes...)
			return r, true
		}
	}
	return AuditActionInfo{}, false
}

// Name is the action in prose ("retry now"; see AuditActionInfo.Name),
// or the action itself when the table does not list it.
func (a AuditAction) Name() string {
	if r, ok := a.Info(); ok {
		return r.Name
	}
	return string(a)
}
