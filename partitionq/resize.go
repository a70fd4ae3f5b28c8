package partitionq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// ResizeRequest asks to change a group's number of slots (Client.Resize).
type ResizeRequest struct {
	Queue, Group string
	// Slots is the new number of slots, 1 to MaxSlots, not the current one.
	Slots int
	// Reason and Actor are recorded in the audit trail.
	Reason, Actor string
}

// ResizeResult says what a resize started.
type ResizeResult struct {
	From, To int
	// Generation is the number of the generation the resize makes.
	Generation int
}

// ErrResizing reports a resize refused because another resize of the group
// is in flight (the error says since when and by whom): wait for it
// (Client.WaitResize) or abort it (Client.AbortResize) first.
var ErrResizing = errors.New("a resize of the group is in flight")

// ErrPastCutover reports an abort refused because the resize is past its
// cutover: some old slot was handed off to the new ones, so the resize can
// only complete.
var ErrPastCutover = errors.New("the resize is past its cutover")

// Resize changes a group's number of slots online, while producers send
// and workers run: the group gets a new generation of r.Slots slots. The
// cutover is the first tick of the queue after this call commits: events
// committed before it are handled by the old slots, after it by the new
// ones. Each old slot drains its events up to the cutover, then hands its
// blocked keys (their failed heads, waiting events, attempts and last
// errors) to their new slots and leaves the engine; each new slot starts
// once every old slot it takes keys from is handed off (one when the new
// number is a multiple of the old, docs/architecture.md "Resizing a
// group"), so every key's order holds across the change, and no key runs
// in two handlers at once. Running workers follow within about a second
// (their next lease renewal; at once on the notification the resize
// sends); workers drive the resize forward, so Resize returns at once
// (WaitResize waits for the end) and a crash of any process at any step
// leaves the group consistent.
//
// One resize of a group at a time: another in flight fails with
// ErrResizing. Workers of partitionq before v0.3 must be stopped first
// (they do not know generations). It runs as partitionq.resize, which only
// the schema's owner and the roles granted it may run (docs/security.md);
// it is recorded in the audit trail. ctx governs the call.
func (c *Client) Resize(ctx context.Context, r ResizeRequest) (ResizeResult, error) {
	if err := ValidateQueueName(r.Queue); err != nil {
		return ResizeResult{}, err
	}
	if err := ValidateGroupName(r.Group); err != nil {
		return ResizeResult{}, err
	}
	if err := ValidateSlots(r.Slots); err != nil {
		return ResizeResult{}, err
	}
	if err := validateActorReason(r.Actor, r.Reason); err != nil {
		return ResizeResult{}, err
	}
	g, err := c.Group(ctx, r.Queue, r.Group)
	if err != nil {
		return ResizeResult{}, err
	}
	if err := c.migrate(ctx); err != nil {
		return ResizeResult{}, err
	}
	gen, err := store.StartResize(ctx, c.pool, c.eng.Schema(), r.Queue, r.Group, r.Slots, c.actor(r.Actor), r.Reason)
	if err != nil {
		return ResizeResult{}, resizeError(err)
	}
	c.log.InfoContext(ctx, "partitionq: resize started", slog.String("queue", r.Queue), slog.String("group", r.Group),
		slog.Int("from", g.Slots), slog.Int("to", r.Slots), slog.Int("generation", gen))
	// The cutover is the queue's next tick. A queue with events ticks
	// within its ticker_max_lag; a quiet one at growing intervals, up to
	// its ticker_idle_period (a minute by default): ask the ticker to tick
	// at its next run. Without the right to, the resize waits for that tick.
	if err := c.eng.ForceTick(ctx, c.pool, r.Queue); err != nil {
		c.log.InfoContext(ctx, "partitionq: the resize's cutover waits for the queue's next tick (forcing one failed)",
			slog.String("queue", r.Queue), slog.Any("error", err))
	}
	return ResizeResult{From: g.Slots, To: r.Slots, Generation: gen}, nil
}

// AbortResizeRequest names the group whose resize to abort.
type AbortResizeRequest struct {
	Queue, Group string
	// Reason and Actor are recorded in the audit trail.
	Reason, Actor string
}

// AbortResize aborts the resize in flight of a group while its cutover has
// not begun (no old slot handed off yet): the new slots' consumers, which
// hold nothing yet, are unregistered, and the old slots go on past the
// cutover. Past it, the resize can only complete: ErrPastCutover. ctx
// governs the call; it is recorded in the audit trail.
func (c *Client) AbortResize(ctx context.Context, r AbortResizeRequest) error {
	queue, group, reason, actor := r.Queue, r.Group, r.Reason, r.Actor
	if err := ValidateQueueName(queue); err != nil {
		return err
	}
	if err := ValidateGroupName(group); err != nil {
		return err
	}
	if err := validateActorReason(actor, reason); err != nil {
		return err
	}
	if _, err := c.Group(ctx, queue, group); err != nil {
		return err
	}
	if err := c.migrate(ctx); err != nil {
		return err
	}
	if _, err := store.AbortResize(ctx, c.pool, c.eng.Schema(), queue, group, c.actor(actor), reason); err != nil {
		return resizeError(err)
	}
	return nil
}

// WaitResize waits until the group has no resize in flight, reading the
// group every poll (more than 0; a resize takes seconds at least: 200ms is
// a fair choice), then returns the group. ctx bounds the wait.
func (c *Client) WaitResize(ctx context.Context, queue, group string, poll time.Duration) (Group, error) {
	if poll <= 0 {
		return Group{}, &ValidationError{Field: "poll", Value: poll.String(), Problem: "it must be more than 0", Fix: "poll every 200ms, say"}
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		g, err := c.Group(ctx, queue, group)
		if err != nil || g.Resize == nil {
			return g, err
		}
		select {
		case <-ctx.Done():
			left := fmt.Sprintf("%d old slots", len(g.Resize.Remaining))
			if len(g.Resize.Remaining) == 1 {
				left = fmt.Sprintf("old slot %d", g.Resize.Remaining[0])
			}
			return g, fmt.Errorf("waiting for the resize of group %q from %d to %d slots (%s not handed off yet): %w",
				group, g.Resize.From, g.Resize.To, left, ctx.Err())
		case <-t.C:
		}
	}
}

// resizeError turns the resize functions' SQLSTATEs into the errors
// callers test, keeping the server's message (which names the fix).
func resizeError(err error) error {
	switch db.Code(err) {
	case store.CodeResizing:
		return fmt.Errorf("%w: %s", ErrResizing, db.Message(err))
	case store.CodePastCutover:
		return fmt.Errorf("%w: %s", ErrPastCutover, db.Message(err))
	case store.CodeSameSlots, store.CodeOldWorker, store.CodeGroupBroken, store.CodeNotTrue:
		return errors.New(db.Message(err))
	}
	if db.IsInsufficientPrivilege(err) {
		return fmt.Errorf("%w: resizing needs the right to run partitionq.resize (the schema's owner, or a role granted it: sql/roles.sql, docs/security.md)", err)
	}
	return err
}
