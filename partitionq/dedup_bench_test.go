package partitionq_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// BenchmarkSendBatchOnce measures SendBatch of 1,000 events without dedup
// ids, with a new dedup id on each (claim, COPY, record), and with dedup
// ids sent before (every message a duplicate: claims only), in one
// database, the three kinds in turn (pqbench's producer step has the same
// rows with the server's cost):
//
//	make db && go test -run '^$' -bench SendBatchOnce -benchtime 50x ./partitionq/
func BenchmarkSendBatchOnce(b *testing.B) {
	db := pgtest.New(b)
	pool := pgtest.Pool(b, db, 4)
	ctx := context.Background()
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 4}); err != nil {
		b.Fatal(err)
	}
	const batch = 1000
	run := 0
	var sentOnce []int // the first ids of the dedup batches sent
	batchOf := func(dedup bool, from int) []partitionq.Message {
		ms := make([]partitionq.Message, batch)
		for i := range ms {
			ms[i] = partitionq.Message{Key: fmt.Sprintf("tenant-%d", (from+i)%1000), Type: "FileCreated",
				Payload: []byte(fmt.Sprintf(`{"path":"/files/%d","size":%d}`, from+i, i))}
			if dedup {
				ms[i].DedupID = fmt.Sprintf("upload-%d", from+i)
			}
		}
		return ms
	}
	for _, kind := range []string{"plain", "dedup", "duplicates"} {
		b.Run(kind, func(b *testing.B) {
			batches := make([][]partitionq.Message, b.N)
			for n := range b.N {
				switch kind {
				case "plain":
					batches[n] = batchOf(false, run*batch)
				case "dedup":
					batches[n] = batchOf(true, run*batch)
					sentOnce = append(sentOnce, run*batch)
				case "duplicates":
					batches[n] = batchOf(true, sentOnce[n%len(sentOnce)])
				}
				if kind != "duplicates" {
					run++
				}
			}
			b.ResetTimer()
			for n := range b.N {
				res, err := c.SendBatch(ctx, "q", batches[n])
				if err != nil {
					b.Fatal(err)
				}
				if kind == "duplicates" && !res[0].Duplicate {
					b.Fatalf("a batch of dedup ids sent before: %+v", res[0])
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
