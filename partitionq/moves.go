package partitionq

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/partitionq/partitionq/partitionq/internal/lease"
)

// Slots move between the workers of a group by themselves: identical
// workers (no WorkerConfig.Slots) share the slots of every generation,
// each holding its share (docs/architecture.md, "Sharing the slots").

// metricMoves counts the slots that came to a worker from another, by
// reason (MoveJoin, MoveLeave, MoveCrash, MoveResize), labelled queue and
// group.
const metricMoves = "partitionq_slot_moves_total"

// Why a slot moved to a worker: the reason label of
// partitionq_slot_moves_total, and the reason a worker logs.
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

// registerMoves registers the worker's counter of moves on reg, or reuses
// the one another worker of the process registered there.
func registerMoves(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricMoves,
		Help: "Slots that came to this worker from another, by reason: join (handed over to balance the group), leave (released by a worker that stopped), crash (taken from a worker whose lease expired), resize (a new generation's slot)."},
		[]string{"queue", "group", "reason"})
	err := reg.Register(cv)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return cv, nil
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			return existing, nil
		}
	}
	return nil, fmt.Errorf("partitionq: WorkerConfig.Registerer: cannot register %s: %w", metricMoves, err)
}

// moved is the runners' OnMove: a slot came to this worker from another.
func (w *Worker) moved(_ int, reason string) {
	if w.moves != nil {
		w.moves.WithLabelValues(w.cfg.Queue, w.cfg.Group, reason).Inc()
	}
}
