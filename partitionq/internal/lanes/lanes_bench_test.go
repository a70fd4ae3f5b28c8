package lanes

import (
	"fmt"
	"testing"
)

// BenchmarkDispatch: the dispatcher's own cost per item, no-op work, a
// run of one item a call.
func BenchmarkDispatch(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("tenant-", i)
	}
	for _, limit := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			d := New(limit, 1, func(string, []int) {})
			for i := 0; i < b.N; i++ {
				d.Add(keys[i%len(keys)], i)
				if i%1000 == 999 {
					d.WaitBelow(2000)
				}
			}
			d.Wait()
		})
	}
}

// BenchmarkDispatchAll: the dispatcher's own cost per item, no-op work,
// items added a chunk of 1000 at a time (AddAll), as the runner's reader
// adds them.
func BenchmarkDispatchAll(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("tenant-", i)
	}
	items := make([]int, len(keys))
	for _, limit := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			d := New(limit, 1, func(string, []int) {})
			for i := 0; i < b.N; i += len(keys) {
				d.AddAll(keys, items)
				d.WaitBelow(2000)
			}
			d.Wait()
		})
	}
}
