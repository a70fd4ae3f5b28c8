package partitionq

import (
	"errors"
	"fmt"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/runner"
)

// Sentinel errors; test for them with errors.Is. A condition whose error
// carries data has a struct error instead, tested with errors.As
// (*DrainingError, *NotHeadError, *SlotCountMismatchError, ...), and no
// sentinel beside it: one form per condition. ErrInvalid is a class, not
// a condition: every *ValidationError of every call matches it, so that a
// caller tells its own mistakes from failures without naming each.
var (
	// ErrNoSuchQueue: the queue does not exist. Run Setup (partitionq setup) first.
	ErrNoSuchQueue = errors.New("no such queue")
	// ErrNoSuchGroup: the consumer group is not registered on the queue. Run Setup first.
	ErrNoSuchGroup = errors.New("no such consumer group")
	// ErrInvalid: an argument failed validation; the error is a *ValidationError.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotBlocked: the key has no blocked head in its slot.
	ErrNotBlocked = parked.ErrNotBlocked
	// ErrHeadBusy: a worker is handling the blocked head right now, and an
	// operator action waited 5 s for it to finish; try again.
	ErrHeadBusy = parked.ErrHeadBusy
	// ErrNoDeadLetter: no dead letter has that id in the group.
	ErrNoDeadLetter = errors.New("no such dead letter")
	// ErrStatementPooling: Worker.Start found its connections going through
	// a pooler in statement mode, which refuses the transactions a worker
	// needs; connect directly, or through session or transaction mode.
	ErrStatementPooling = runner.ErrStatementPooling
	// ErrAmbiguousEngine: NewClient was given no Config.EngineSchema and
	// the database has both engines (pgq and pgque): name the one to use.
	ErrAmbiguousEngine = engine.ErrBothInstalled
)

// ValidationError says which argument is wrong, why, and what to do. It
// matches ErrInvalid with errors.Is.
type ValidationError struct {
	Field   string // the argument or config field, e.g. "key" or "WorkerConfig.Limits.Concurrency"
	Value   string // the offending value, quoted for display (may be shortened)
	Problem string // what is wrong with it
	Fix     string // what to do instead
}

func (e *ValidationError) Error() string {
	s := fmt.Sprintf("invalid %s %s: %s", e.Field, e.Value, e.Problem)
	if e.Fix != "" {
		s += ": " + e.Fix
	}
	return s
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// SlotCountMismatchError reports that a group has another number of slots
// than asked for (GroupSpec.Slots of Setup, WorkerConfig.SlotCount). The number of slots is
// changed with Client.Resize (partitionq resize), not by setup.
type SlotCountMismatchError struct {
	Queue, Group string
	Existing     int // slots the group has (its current generation's)
	Requested    int // slots the caller asked for
	// Resizing is the resize in flight, if any.
	Resizing *ResizeState
}

func (e *SlotCountMismatchError) Error() string {
	if r := e.Resizing; r != nil {
		return fmt.Sprintf("group %q on queue %q is being resized from %d to %d slots, not %d: wait for that resize to end (partitionq resize --wait) and resize again, or abort it first (partitionq resize --abort)",
			e.Group, e.Queue, r.From, r.To, e.Requested)
	}
	return fmt.Sprintf("group %q on queue %q has %d slots, not %d: setup does not change the number of slots; change it online with partitionq resize --queue %s --group %s --slots %d (Client.Resize; docs/operations.md, \"Changing N\"), or use %d",
		e.Group, e.Queue, e.Existing, e.Requested, e.Queue, e.Group, e.Requested, e.Existing)
}

// DrainingError refuses an operator action that named no event (HeadID
// zero) on a key whose head has never failed: the key is draining (see
// KeyDraining), and acting on "the current head" would act on a healthy
// event. Nothing changed. To act on that event anyway, name it in
// ActionRequest.HeadID. Test for it with errors.As.
type DrainingError struct {
	Action  AuditAction // AuditSkip, AuditRetry or AuditQuarantine
	Key     string
	EventID int64 // the key's head, which has never failed
}

func (e *DrainingError) Error() string {
	return fmt.Sprintf("key %q is draining, not blocked: its head, event %d, has never failed (the key's failed event was resolved and its waiting events now run in order, without help): %s changed nothing; to %s event %d anyway, name it (ActionRequest.HeadID %d)",
		e.Key, e.EventID, e.Action, e.Action, e.EventID, e.EventID)
}

func noSuchQueue(queue string) error {
	return fmt.Errorf("%w %q: run partitionq setup (Client.Setup) first", ErrNoSuchQueue, queue)
}

func noSuchGroup(queue, group string) error {
	return fmt.Errorf("%w %q on queue %q: run partitionq setup (Client.Setup) first", ErrNoSuchGroup, group, queue)
}
