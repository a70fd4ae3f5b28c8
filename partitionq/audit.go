package partitionq

// AuditAction is an action the audit trail records (AuditEntry.Action):
// one of the constants below, each a row of AuditActions. Its value is the
// name the database records and the CLI's audit output shows ("skip",
// "drop_group"); converting it to a string gives that name.
type AuditAction string

// The actions of the audit trail.
const (
	// AuditSkip: Client.Skip moved a blocked key's head to the dead letters.
	AuditSkip AuditAction = "skip"
	// AuditRetry: Client.RetryNow brought the next attempt of a head forward to now.
	AuditRetry AuditAction = "retry"
	// AuditQuarantine: Client.Quarantine moved a key's head and its waiting
	// events to the dead letters.
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

// AuditActionInfo is a row of AuditActions: an action of the audit trail,
// the words that name it and the outcomes it records.
type AuditActionInfo struct {
	Action AuditAction
	// Name is the action in prose and in the console's prompts: "retry
	// now" for AuditRetry, else the action itself ("drop_group": "drop
	// group").
	Name string
	// Command is the partitionq command that does it ("dlq replay"); ""
	// for none.
	Command string
	// Outcomes lists what AuditEntry.Outcome says for this action: the
	// Outcome values it records as they are, and the patterns of its
	// free-text outcomes ("purged N (filter)": N a count; the parentheses
	// only when there is something to say in them, each part only when
	// there is: the filter as DeadLetterQuery.Describe says it).
	Outcomes []string
}

// auditActions is the one table of the audit trail's actions.
var auditActions = []AuditActionInfo{
	{Action: AuditSkip, Name: "skip", Command: "skip",
		Outcomes: []string{string(OutcomeSkipped), string(OutcomeAlreadyResolved)}},
	{Action: AuditRetry, Name: "retry now", Command: "retry",
		Outcomes: []string{string(OutcomeRetryScheduled), string(OutcomeAlreadyResolved)}},
	{Action: AuditQuarantine, Name: "quarantine", Command: "quarantine",
		Outcomes: []string{string(OutcomeQuarantined), string(OutcomeAlreadyResolved)}},
	{Action: AuditReplay, Name: "replay", Command: "dlq replay",
		Outcomes: []string{string(OutcomeReplayed), string(OutcomeAlreadyReplayed), "replayed N (already_replayed M, filter)"}},
	{Action: AuditPurge, Name: "purge", Command: "dlq purge",
		Outcomes: []string{"purged N (filter)"}},
	{Action: AuditResize, Name: "resize", Command: "resize",
		Outcomes: []string{"started: A to B slots (generation G)", "completed: A to B slots (generation G)", "aborted: A to B slots"}},
	{Action: AuditDropGroup, Name: "drop group", Command: "drop-group",
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

// Command is the partitionq command that does a ("dlq replay"; see
// AuditActionInfo.Command), or "" when the table does not list it.
func (a AuditAction) Command() string {
	r, _ := a.Info()
	return r.Command
}
