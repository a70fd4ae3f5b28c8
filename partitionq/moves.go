package partitionq

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/partitionq/partitionq/partitionq/internal/lease"
)

// Slots move between the workers of a group by themselves: identical
// workers (no WorkerConfig.Slots) share the slots of every generation,
// each holding its share (docs/architecture.md, "Sharing the slots").

// Why a slot moved to a worker: the reason label of
// partitionq_slot_moves_total (metrics.go), and the reason a worker logs.
const (
	// MoveJoin is a slot handed over by its owner to balance the group,
	// because a worker joined (a graceful handover: nothing repeats).
	MoveJoin = lease.ReasonJoin
	// MoveLeave is a slot its owner released as it stopped.
	MoveLeave = lease.ReasonLeave
	// MoveCrash is a slot taken from a worker whose lease expired with its
	// session gone (it died, or lost the database for longer than its
	// lease).
	MoveCrash = lease.ReasonCrash
	// MoveResize is a slot of a generation made by a resize, owned for the
	// first time.
	MoveResize = lease.ReasonResize
)

// newMemberToken returns a worker's member token: unique to the worker, so
// that replicas with one configuration (one Identity, even) tell each
// other apart.
func newMemberToken() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on the systems Go supports
	}
	return hex.EncodeToString(b)
}
