package partitionq

import (
	"errors"
	"fmt"

	"github.com/partitionq/partitionq/partitionq/internal/parked"
)

// Sentinel errors; test for them with errors.Is.
var (
	// ErrNoSuchQueue: the queue does not exist. Run Setup (partitionq setup) first.
	ErrNoSuchQueue = errors.New("no such queue")
	// ErrNoSuchGroup: the consumer group is not registered on the queue. Run Setup first.
	ErrNoSuchGroup = errors.New("no such consumer group")
	// ErrInvalid: an argument failed validation; the error is a *ValidationError.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotBlocked: the key has no blocked head in its slot.
	ErrNotBlocked = parked.ErrNotBlocked
	// ErrHeadBusy: a worker is handling the blocked head right now; try again.
	ErrHeadBusy = parked.ErrHeadBusy
	// ErrNeverFailed: an operator action found a key whose head never
	// failed (the key is draining: its waiting events run next) and did not
	// name that head (Action.HeadID, --event).
	ErrNeverFailed = parked.ErrNeverFailed
	// ErrNoDeadLetter: no dead letter has that id in the group.
	ErrNoDeadLetter = errors.New("no such dead letter")
)

// ValidationError says which argument is wrong, why, and what to do. It
// matches ErrInvalid with errors.Is.
type ValidationError struct {
	Field   string // the argument or config field, e.g. "key" or "WorkerConfig.Concurrency"
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

// SlotCountMismatchError reports that a group exists with another number of
// slots than asked for. The number of slots of a group is fixed.
type SlotCountMismatchError struct {
	Queue, Group string
	Existing     int // slots the group has in the engine
	Requested    int // slots the caller asked for
}

func (e *SlotCountMismatchError) Error() string {
	return fmt.Sprintf("group %q on queue %q has %d slots, not %d: the number of slots of a group is fixed; use %d, or create a new group for %d slots (see docs/operations.md, changing N)",
		e.Group, e.Queue, e.Existing, e.Requested, e.Existing, e.Requested)
}

func noSuchQueue(queue string) error {
	return fmt.Errorf("%w %q: run partitionq setup (Client.Setup) first", ErrNoSuchQueue, queue)
}

func noSuchGroup(queue, group string) error {
	return fmt.Errorf("%w %q on queue %q: run partitionq setup (Client.Setup) first", ErrNoSuchGroup, group, queue)
}
