package partitionq_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// Client.Key shows a key's recent dedup hits: its dedup ids that refused
// duplicates, the most recent hit first, at most KeyEventsLimit, with the
// number of duplicates refused in all and the queue's window. Ids without
// a hit, and other keys' hits, are not shown.
func TestKeyShowsDedupHits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.client.Setup(b.ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 2, DedupWindow: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	send := func(key, id string) partitionq.SendResult {
		t.Helper()
		r, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: key, DedupID: id})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var firstIDs []int64
	for i := range partitionq.KeyEventsLimit + 5 {
		firstIDs = append(firstIDs, send("tenant-1", fmt.Sprintf("req-%02d", i)).ID)
	}
	send("tenant-1", "never-again")
	send("tenant-2", "other-key")
	send("tenant-2", "other-key")
	// req-00 twice, then each other id once, so req-24 is the last hit.
	send("tenant-1", "req-00")
	for i := range partitionq.KeyEventsLimit + 5 {
		send("tenant-1", fmt.Sprintf("req-%02d", i))
	}
	ki, err := b.client.Key(b.ctx, "q", "g", "tenant-1")
	if err != nil {
		t.Fatal(err)
	}
	if ki.DedupWindow != 2*time.Hour || ki.Duplicates != partitionq.KeyEventsLimit+6 || len(ki.DedupHits) != partitionq.KeyEventsLimit {
		t.Fatalf("key tenant-1: window %s, %d duplicates, %d hits listed; want 2h, %d, %d",
			ki.DedupWindow, ki.Duplicates, len(ki.DedupHits), partitionq.KeyEventsLimit+6, partitionq.KeyEventsLimit)
	}
	last := ki.DedupHits[0]
	if last.DedupID != "req-24" || last.EventID != firstIDs[24] || last.Hits != 1 || last.ExpiresAt.Sub(last.SentAt) != 2*time.Hour {
		t.Errorf("the most recent hit: %+v; want req-24 of event %d, 1 hit, expiring 2h after it was sent", last, firstIDs[24])
	}
	for i := 1; i < len(ki.DedupHits); i++ {
		if h := ki.DedupHits[i]; h.LastHit.After(ki.DedupHits[i-1].LastHit) || h.DedupID == "never-again" {
			t.Fatalf("hit %d: %+v after %+v", i, h, ki.DedupHits[i-1])
		}
	}
	other, err := b.client.Key(b.ctx, "q", "g", "tenant-2")
	if err != nil || other.Duplicates != 1 || len(other.DedupHits) != 1 || other.DedupHits[0].DedupID != "other-key" {
		t.Fatalf("key tenant-2: %+v, %v", other.DedupHits, err)
	}
	none, err := b.client.Key(b.ctx, "q", "g", "tenant-3")
	if err != nil || none.Duplicates != 0 || len(none.DedupHits) != 0 {
		t.Fatalf("a key without hits: %+v, %v", none.DedupHits, err)
	}
}
