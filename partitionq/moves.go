package partitionq

import (
	"crypto/rand"
	"encoding/hex"
)

// Slots move between the workers of a group by themselves: identical
// workers (no WorkerConfig.Pins) share the slots of every generation,
// each holding its share (docs/architecture.md, "Sharing the slots").
// Why a slot moved to a worker is the label reason of
// partitionq_slot_moves_total and of the worker's log (lease.Reasons:
// join, leave, crash, resize; docs/operations.md says what each means).

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
