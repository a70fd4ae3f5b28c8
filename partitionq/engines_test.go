package partitionq_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/partitionq/partitionq/partitionq"
)

// One batch of more events than a slot reads from the engine at a time
// (ChunkSizeDefault) is read chunk by chunk from the batch cursor, whose
// rows carry the engine's own ev_txid: bigint on PgQ, xid8 on PgQue (which
// a scan into int64 cannot read, so every batch was retried forever).
func TestBatchLargerThanAChunk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	const keys, perKey = 50, 2*partitionq.ChunkSizeDefault/50 + 10
	var ms []partitionq.Message
	sent := map[string][]string{}
	for i := range perKey {
		for k := range keys {
			key, p := fmt.Sprintf("tenant-%d", k), fmt.Sprintf(`{"seq":%d}`, i)
			ms = append(ms, partitionq.Message{Key: key, Payload: []byte(p)})
			sent[key] = append(sent[key], p)
		}
	}
	// One transaction, sent before the worker's ticker runs: one batch.
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t)
	b.worker(t, partitionq.WorkerConfig{Handler: rec, Concurrency: 8})
	rec.waitTotal(t, len(ms))

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.total != len(ms) {
		t.Errorf("handled %d events, sent %d", rec.total, len(ms))
	}
	for key, want := range sent {
		if got := rec.byKey[key]; !reflect.DeepEqual(got, want) {
			t.Fatalf("key %s handled %d events out of order or incomplete, sent %d", key, len(got), len(want))
		}
	}
	for id, n := range rec.ids {
		if n != 1 {
			t.Errorf("event %d handled %d times", id, n)
		}
	}
}
