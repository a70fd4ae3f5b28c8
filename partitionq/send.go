package partitionq

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
)

// Message is one event to send.
//
// The text rule, the same for Key, Type and Payload (and for the actor and
// reason of operator actions): valid UTF-8 without NUL bytes, which is what
// PostgreSQL text can hold. Valid UTF-8 rules out stray bytes (0xff) and
// the surrogate code points U+D800 to U+DFFF (bytes ED A0 80 to ED BF BF:
// a Go string can hold them; they are halves of UTF-16 pairs, not
// characters). Anything else is refused with a *ValidationError naming the
// field, never stored changed: two keys that differ only in their invalid
// bytes would otherwise become one. Any character is allowed, control
// characters included (the command and the console show them escaped).
// The partitionq command checks its flags and JSON lines with this rule
// (Validate), decoding JSON without loss so that it sees what was written.
type Message struct {
	// Key is the partition key (for example the tenant id): events sharing
	// it are handled in order, one at a time. Required: 1 to MaxKeyLen bytes.
	Key string
	// Type is the event type, e.g. "FileCreated". Optional; up to
	// MaxTypeLen bytes.
	Type string
	// Payload is the event body, stored as text (JSON is the usual choice;
	// base64 for binary data).
	Payload []byte
}

// Validate checks a message against the text rule and the limits, the way
// Send does.
func (m Message) Validate() error {
	if err := ValidateKey(m.Key); err != nil {
		return err
	}
	if err := validateText("type", m.Type, MaxTypeLen); err != nil {
		return err
	}
	return validateText("payload", string(m.Payload), maxText)
}

// sendChunk bounds how many events go into one statement of a batch send.
const sendChunk = 5000

// Send appends one event to queue and returns its event id. ctx governs the
// insert.
func (c *Client) Send(ctx context.Context, queue string, m Message) (int64, error) {
	ids, err := c.send(ctx, c.pool, queue, []Message{m})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// SendTx is Send inside the caller's transaction: the event is committed or
// rolled back with the caller's own writes.
func (c *Client) SendTx(ctx context.Context, tx pgx.Tx, queue string, m Message) (int64, error) {
	ids, err := c.send(ctx, tx, queue, []Message{m})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// SendBatch appends many events in as few round trips as possible (one per
// 5,000 events, all in one transaction) and returns their ids in order.
// Every message is validated first: on any invalid message nothing is sent
// and the error names its index. ctx governs the whole call.
func (c *Client) SendBatch(ctx context.Context, queue string, ms []Message) ([]int64, error) {
	if len(ms) <= sendChunk {
		return c.send(ctx, c.pool, queue, ms)
	}
	var ids []int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		ids, err = c.send(ctx, tx, queue, ms)
		return err
	})
	return ids, err
}

// SendBatchTx is SendBatch inside the caller's transaction.
func (c *Client) SendBatchTx(ctx context.Context, tx pgx.Tx, queue string, ms []Message) ([]int64, error) {
	return c.send(ctx, tx, queue, ms)
}

// BatchError says which message of a batch is invalid.
type BatchError struct {
	Index int // position of the message in the batch, from 0
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("message %d: %v", e.Index, e.Err) }
func (e *BatchError) Unwrap() error { return e.Err }

func (c *Client) send(ctx context.Context, db engine.DB, queue string, ms []Message) ([]int64, error) {
	if err := ValidateQueueName(queue); err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, nil
	}
	evs := make([]engine.NewEvent, len(ms))
	for i, m := range ms {
		if err := m.Validate(); err != nil {
			if len(ms) == 1 {
				return nil, err
			}
			return nil, &BatchError{Index: i, Err: err}
		}
		evs[i] = engine.NewEvent{Key: m.Key, Type: m.Type, Data: string(m.Payload)}
	}
	var ids []int64
	for start := 0; start < len(evs); start += sendChunk {
		end := min(start+sendChunk, len(evs))
		var chunk []int64
		var err error
		if end-start == 1 {
			var id int64
			id, err = c.eng.Insert(ctx, db, queue, evs[start])
			chunk = []int64{id}
		} else {
			chunk, err = c.eng.InsertMany(ctx, db, queue, evs[start:end])
		}
		if err != nil {
			return nil, c.classifySendError(ctx, queue, err)
		}
		ids = append(ids, chunk...)
	}
	return ids, nil
}

// classifySendError turns the engine's "unknown queue" into ErrNoSuchQueue.
// It asks the catalog rather than reading the error's text.
func (c *Client) classifySendError(ctx context.Context, queue string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if _, ok, qerr := c.eng.QueueID(ctx, c.pool, queue); qerr == nil && !ok {
		return noSuchQueue(queue)
	}
	return err
}
