package partitionq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
)

// Message is one event to send.
//
// The text rule, the same for Key, Type, Payload and DedupID (and for the
// actor and reason of operator actions): valid UTF-8 without NUL bytes,
// which is what PostgreSQL text can hold. Valid UTF-8 rules out stray bytes
// (0xff) and the surrogate code points U+D800 to U+DFFF (bytes ED A0 80 to
// ED BF BF: a Go string can hold them; they are halves of UTF-16 pairs, not
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
	// DedupID, when not empty, makes the send happen once: within the
	// dedup window, another message with the same DedupID sent to the same
	// queue inserts nothing and its SendResult names the event first sent
	// with it (docs/guarantees.md, "Send once"). Up to MaxDedupIDLen bytes
	// of text. Defaults to "": no deduplication.
	DedupID string
	// DedupWindow is how long DedupID is remembered from this send on.
	// Only with a DedupID; from MinDedupWindow to MaxDedupWindow. Defaults
	// to 0: the queue's window (GroupSpec.DedupWindow, else
	// DedupWindowDefault).
	DedupWindow time.Duration
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
	if err := validateText("payload", string(m.Payload), maxText); err != nil {
		return err
	}
	return m.validateDedup()
}

// SendResult is the outcome of sending one message.
type SendResult struct {
	// ID is the id of the event the message was sent as; for a duplicate,
	// the id of the event first sent with its DedupID.
	ID int64
	// Duplicate reports that the message's DedupID was sent within its
	// window before: nothing was inserted.
	Duplicate bool
}

// sendChunk bounds how many events go into one statement of a batch send.
const sendChunk = 5000

// Send appends one event to queue and returns its event id (for a
// duplicate of an earlier send with the same Message.DedupID, that send's
// event id, with Duplicate set). ctx governs the insert.
func (c *Client) Send(ctx context.Context, queue string, m Message) (SendResult, error) {
	res, err := c.send(ctx, c.pool, queue, []Message{m})
	if err != nil {
		return SendResult{}, err
	}
	return res[0], nil
}

// SendTx is Send inside the caller's transaction: the event is committed or
// rolled back with the caller's own writes, and so is its dedup record. A
// send with a DedupID runs in a savepoint of tx: when it fails (a
// *DedupKeyError, a database error), tx is left as it was before the call.
func (c *Client) SendTx(ctx context.Context, tx pgx.Tx, queue string, m Message) (SendResult, error) {
	res, err := c.send(ctx, tx, queue, []Message{m})
	if err != nil {
		return SendResult{}, err
	}
	return res[0], nil
}

// SendBatch appends many events in as few round trips as possible (one per
// 5,000 events, all in one transaction) and returns their results in
// order. Every message is validated first: on any invalid message nothing
// is sent and the error names its index. Messages with a DedupID take two
// more statements (docs/guarantees.md, "Send once"); a DedupID given twice
// in one batch is sent once, the later messages being its duplicates. A
// batch of no messages sends nothing, and still fails with ErrNoSuchQueue
// when the queue does not exist: a producer checks its queue that way,
// with no right beyond sending (Groups needs the viewer's). ctx governs
// the whole call.
func (c *Client) SendBatch(ctx context.Context, queue string, ms []Message) ([]SendResult, error) {
	if len(ms) <= sendChunk {
		return c.send(ctx, c.pool, queue, ms)
	}
	var res []SendResult
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		res, err = c.send(ctx, tx, queue, ms)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// SendBatchTx is SendBatch inside the caller's transaction (a batch with
// dedup ids in a savepoint of it, as SendTx; a batch of no messages checks
// the queue, as SendBatch).
func (c *Client) SendBatchTx(ctx context.Context, tx pgx.Tx, queue string, ms []Message) ([]SendResult, error) {
	return c.send(ctx, tx, queue, ms)
}

// BatchError says which message of a batch is invalid.
type BatchError struct {
	Index int // position of the message in the batch, from 0
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("message %d: %v", e.Index, e.Err) }
func (e *BatchError) Unwrap() error { return e.Err }

func (c *Client) send(ctx context.Context, db engine.DB, queue string, ms []Message) ([]SendResult, error) {
	if err := ValidateQueueName(queue); err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		// Nothing to send: the queue is checked all the same (SendBatch).
		if _, ok, err := c.eng.QueueID(ctx, db, queue); err != nil {
			return nil, err
		} else if !ok {
			return nil, noSuchQueue(queue)
		}
		return nil, nil
	}
	evs := make([]engine.NewEvent, len(ms))
	dedup := false
	for i, m := range ms {
		if err := m.Validate(); err != nil {
			return nil, batchError(len(ms), i, err)
		}
		evs[i] = engine.NewEvent{Key: m.Key, Type: m.Type, Data: string(m.Payload)}
		dedup = dedup || m.DedupID != ""
	}
	if dedup {
		return c.sendOnce(ctx, db, queue, ms, evs)
	}
	ids, err := c.insert(ctx, db, queue, evs)
	if err != nil {
		return nil, err
	}
	res := make([]SendResult, len(ids))
	for i, id := range ids {
		res[i].ID = id
	}
	return res, nil
}

// batchError is err of message i of a send of n messages: err itself for
// a single message, a *BatchError naming i in a batch.
func batchError(n, i int, err error) error {
	if n == 1 {
		return err
	}
	return &BatchError{Index: i, Err: err}
}

// insert inserts evs into queue on db, sendChunk at a time, and returns
// their ids in order.
func (c *Client) insert(ctx context.Context, db engine.DB, queue string, evs []engine.NewEvent) ([]int64, error) {
	ids := make([]int64, 0, len(evs))
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
