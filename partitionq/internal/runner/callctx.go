package runner

import (
	"context"
	"sync"
	"time"
)

// callCtx is the context of one handler call with a timeout. It behaves as
// context.WithDeadline(parent, deadline) whose cancel runs when the call
// ends (end), but it makes that context, with its timer and its place among
// the parent's children, only when the handler asks for Done or a Value:
// a handler that returns quickly without looking at its context (or that
// only checks Err) costs one small allocation rather than a timer and two
// map operations under the parent's lock per event.
type callCtx struct {
	parent   context.Context
	deadline time.Time

	mu     sync.Mutex
	ctx    context.Context // the real context, nil until Done or Value
	cancel context.CancelFunc
	ended  error // once the call ended without the real context: its Err from then on
}

func newCallCtx(parent context.Context, deadline time.Time) *callCtx {
	return &callCtx{parent: parent, deadline: deadline}
}

// real returns the real context, making it when first needed (cancelled at
// once when the call has ended).
func (c *callCtx) real() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithDeadline(c.parent, c.deadline)
		if c.ended != nil {
			c.cancel()
		}
	}
	return c.ctx
}

func (c *callCtx) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *callCtx) Done() <-chan struct{} { return c.real().Done() }

func (c *callCtx) Value(key any) any { return c.real().Value(key) }

// Err is what the real context's Err would be, without making it.
func (c *callCtx) Err() error {
	c.mu.Lock()
	ctx, ended := c.ctx, c.ended
	c.mu.Unlock()
	switch {
	case ctx != nil:
		return ctx.Err()
	case ended != nil:
		return ended
	}
	return c.lazyErr()
}

func (c *callCtx) lazyErr() error {
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// end cancels the call's context: the call has returned. A nil c (a call
// without a timeout) has nothing to end.
func (c *callCtx) end() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
		return
	}
	if c.ended = c.lazyErr(); c.ended == nil {
		c.ended = context.Canceled
	}
}
