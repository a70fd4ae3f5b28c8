package partitionq_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// BenchmarkStatusBacklog measures one Status call (its scan of the
// unfinished events counts every slot's pending exactly) with 1,000,000
// events pending, 90% of them on one key, for groups of 4, 64 and 256 slots
// on the same queue, and with nothing pending (docs/operations.md):
//
//	go test -run '^$' -bench StatusBacklog -benchtime 5x ./partitionq/
func BenchmarkStatusBacklog(b *testing.B) {
	db := pgtest.New(b)
	pool := pgtest.Pool(b, db, 8)
	ctx := context.Background()
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ns := []int{4, 64, 256}
	for _, n := range ns {
		if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: fmt.Sprintf("g%d", n), Slots: n}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "idle", Group: "g", Slots: 64}); err != nil {
		b.Fatal(err)
	}
	const total = 1_000_000
	ms := make([]partitionq.Message, 0, 5000)
	for i := 0; i < total; {
		ms = ms[:0]
		for ; len(ms) < 5000 && i < total; i++ {
			key := "hot"
			if i%10 == 0 {
				key = fmt.Sprintf("tenant-%d", i%1000)
			}
			ms = append(ms, partitionq.Message{Key: key, Type: "FileCreated", Payload: []byte(`{"path":"/a"}`)})
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := c.SendBatchTx(ctx, tx, "q", ms)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "analyze"); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, queue, group string, want int64) {
		for range b.N {
			st, err := c.Status(ctx, queue, group)
			if err != nil {
				b.Fatal(err)
			}
			if st.Pending != want {
				b.Fatalf("pending %d, want %d", st.Pending, want)
			}
		}
	}
	for _, n := range ns {
		b.Run(fmt.Sprintf("pending=1M/slots=%d", n), func(b *testing.B) { run(b, "q", fmt.Sprintf("g%d", n), total) })
	}
	b.Run("pending=0/slots=64", func(b *testing.B) { run(b, "idle", "g", 0) })
}
