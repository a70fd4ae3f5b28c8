package partitionq

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/runner"
	"github.com/partitionq/partitionq/partitionq/internal/slotstats"
)

// ErrNotOwner reports that the worker that handed an event to its handler
// no longer owns the event's slot: another worker took it over (after this
// one lost its lease) or it was released. A handler's write checked with
// CheckOwner fails with it instead of committing.
var ErrNotOwner = errors.New("the worker no longer owns the event's slot")

// codeNotOwner is the SQLSTATE partitionq's ownership functions raise.
const codeNotOwner = "PQ001"

// CheckOwner checks, inside the caller's transaction tx, that the worker
// that handed ev to its handler still owns ev's slot at ev.Epoch (the
// fencing token), and holds the slot's ownership row until tx ends: no other
// worker can take the slot over between the check and tx's commit. Call it
// in a handler that writes to the same database, after its writes and before
// it commits; when it fails with ErrNotOwner, roll back (the slot's new
// owner handles the event). It needs execute on partitionq.check_owner (the
// worker role of sql/roles.sql has it). ctx governs the check.
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	// ... the handler's writes ...
//	if err := client.CheckOwner(ctx, tx, ev); err != nil {
//		return err
//	}
//	return tx.Commit(ctx)
func (c *Client) CheckOwner(ctx context.Context, tx pgx.Tx, ev *Event) error {
	ok, err := lease.CheckOwner(ctx, tx, ev.Queue, ev.Group, ev.Slots, ev.Slot, ev.Epoch)
	if err != nil {
		return fmt.Errorf("check the owner of slot %d: %w", ev.Slot, err)
	}
	if !ok {
		return fmt.Errorf("%w (slot %d, epoch %d)", ErrNotOwner, ev.Slot, ev.Epoch)
	}
	return nil
}

// TxHandler handles an event inside a transaction that the worker opens on
// the client's pool. When HandleTx returns nil, the worker checks in the
// same transaction that it still owns the event's slot and records the event
// as done, then commits: the handler's writes and the event's completion
// commit together or not at all. After a crash (of the worker, its
// connection, or the server) the event is handled again only if that
// transaction did not commit, so its writes to the same database happen
// exactly once. Returning an error rolls the transaction back; the error is
// a failure as for Handler (DeadLetterNow and RetryAfter apply). The handler
// must not commit or roll back tx itself.
type TxHandler interface {
	HandleTx(ctx context.Context, tx pgx.Tx, ev *Event) error
}

// TxHandlerFunc adapts a function to TxHandler.
type TxHandlerFunc func(ctx context.Context, tx pgx.Tx, ev *Event) error

// HandleTx calls f.
func (f TxHandlerFunc) HandleTx(ctx context.Context, tx pgx.Tx, ev *Event) error {
	return f(ctx, tx, ev)
}

func (w *Worker) txHandleFunc(h TxHandler) runner.Handler {
	return func(ctx context.Context, c runner.Call) runner.Result {
		ev := w.event(c)
		var herr error
		err := pgx.BeginFunc(ctx, w.c.pool, func(tx pgx.Tx) error {
			if herr = h.HandleTx(ctx, tx, ev); herr != nil {
				return herr
			}
			err := slotstats.RecordDone(ctx, tx, ev.Queue, ev.Group, ev.Slots, ev.Slot, ev.Epoch, ev.batch, ev.ID)
			if db.Code(err) == codeNotOwner {
				return fmt.Errorf("%w (slot %d, epoch %d)", ErrNotOwner, ev.Slot, ev.Epoch)
			}
			return err
		})
		if herr != nil {
			return result(herr)
		}
		return result(err)
	}
}
