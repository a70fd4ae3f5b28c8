package partitionq_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// BenchmarkBulkDeadLetters measures a bulk replay and a bulk purge of n
// dead letters of 100 keys (each one transaction, one audit entry), from
// dead letters written straight into partitionq.dead_letter:
//
//	make db && go test -run '^$' -bench BulkDeadLetters -benchtime 3x ./partitionq/
func BenchmarkBulkDeadLetters(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, op := range []string{"replay", "purge"} {
			b.Run(fmt.Sprintf("%s/n=%d", op, n), func(b *testing.B) {
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
				match := partitionq.DeadLetterQuery{Queue: "q", Group: "g", Pending: true}
				for range b.N {
					b.StopTimer()
					if _, err := pool.Exec(ctx, `truncate partitionq.dead_letter`); err != nil {
						b.Fatal(err)
					}
					if _, err := pool.Exec(ctx, `insert into partitionq.dead_letter (queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts, reason)
						select 'q', 'g', 0, i, now(), 'T', '{"i":' || i || '}', 'tenant-' || (i % 100), 1, 'handler'
						  from generate_series(1, $1) i`, n); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					r := partitionq.BulkRequest{Match: match, Reason: "bench"}
					var res partitionq.BulkResult
					if op == "replay" {
						res, err = c.ReplayMatching(ctx, r)
					} else {
						res, err = c.PurgeMatching(ctx, r)
					}
					if err != nil || res.Count != n {
						b.Fatalf("%s: %d of %d, %v", op, res.Count, n, err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/dead_letter")
			})
		}
	}
}
