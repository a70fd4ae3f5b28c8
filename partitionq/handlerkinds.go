package partitionq

import (
	"context"
	"errors"
)

// The kinds of handler other than a Handler's one call per event go in
// WorkerConfig.Handler through these three, so that a worker has one
// handler field and no either-or.

// InTx returns a Handler that the worker runs inside a transaction of its
// own for each event (see TxHandler): h's writes and the event's
// completion commit together or not at all. Its Handle, called outside a
// Worker, returns an error: the transaction is the worker's.
func InTx(h TxHandler) Handler { return inTx{h} }

// Runs returns a Handler that the worker hands runs of a key's
// consecutive events, one call per run (see RunHandler), up to
// Limits.MaxRun events. Its Handle, called outside a Worker, hands h a
// run of one event.
func Runs(h RunHandler) Handler { return runs{h} }

// RunsInTx returns a Handler that the worker hands runs, each inside a
// transaction of its own (see TxRunHandler). Its Handle, called outside a
// Worker, returns an error: the transaction is the worker's.
func RunsInTx(h TxRunHandler) Handler { return runsInTx{h} }

// errOutsideWorker is what InTx's and RunsInTx's Handle return: only a
// Worker opens their transaction.
var errOutsideWorker = errors.New("partitionq: a transactional handler (InTx, RunsInTx) runs in a Worker, which opens its transaction; call its HandleTx or HandleRunTx with a transaction of your own")

type inTx struct{ h TxHandler }

func (inTx) Handle(context.Context, *Event) error { return errOutsideWorker }

type runs struct{ h RunHandler }

func (r runs) Handle(ctx context.Context, ev *Event) error {
	_, failure := runOutcome(r.h.HandleRun(ctx, []*Event{ev}), 1)
	return failure
}

type runsInTx struct{ h TxRunHandler }

func (runsInTx) Handle(context.Context, *Event) error { return errOutsideWorker }
