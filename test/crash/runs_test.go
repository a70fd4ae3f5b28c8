package crash

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/ordercheck"
	"github.com/partitionq/partitionq/test/pgtest"
)

// Worker processes with a run handler (and with a TxRunHandler), killed
// with SIGKILL while runs are in flight (each event of a run held a few
// milliseconds), some events failing once in the middle of their runs:
// judged by every handler run (a run's events recorded one by one) and by
// completions: 0 lost, 0 order violations, 0 overlaps, and what repeats
// bounded by the runs that can be in flight at a kill (none with the
// TxRunHandler, whose log rows commit with the runs' completion).
func TestRunHandlerUnderKills(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"run", "txrun"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			const slots, keys, perKey, maxRun, conc, kills = 2, 8, 40, 16, 4, 2
			e := newEnv(t, slots)
			runLog := filepath.Join(t.TempDir(), "runs.log")
			args := []string{"-run-handler", "-max-run", strconv.Itoa(maxRun), "-concurrency", strconv.Itoa(conc), "-runlog", runLog,
				"-hold", "20ms", "-jitter", "0"}
			if mode == "txrun" {
				args = append(args, "-tx")
			}
			sent := map[string]int{}
			var evs []sentEvent
			for s := range perKey {
				for k := range keys {
					key := fmt.Sprintf("tenant-%d", k)
					f := 0
					if s%20 == 7 {
						f = 1 // fails once, in the middle of a run
					}
					evs = append(evs, sentEvent{key: key, seq: s, f: f})
					sent[key] = perKey
				}
			}
			w := e.start(t, args...)
			e.send(t, evs)
			died := map[string]time.Time{}
			total := keys * perKey
			for i := range kills {
				want := (i + 1) * total / (kills + 2)
				pgtest.WaitFor(t, 60*time.Second, fmt.Sprintf("%d events resolved", want), func() (bool, error) { return e.resolved(t) >= want, nil })
				w.kill()
				died[strconv.Itoa(w.pid())] = time.Now()
				w = e.start(t, args...)
			}
			pgtest.WaitFor(t, 2*time.Minute, fmt.Sprintf("all %d events resolved", total), func() (bool, error) { return e.resolved(t) >= total, nil })
			runs, err := ordercheck.ReadRunLogs([]string{runLog}, died)
			if err != nil {
				t.Fatal(err)
			}
			r := e.check(t, sent).WithRuns(runs)
			t.Logf("%d kills: %s", kills, r)
			if !r.OK() {
				t.Fatalf("%s: %v", r, r.Examples)
			}
			if mode == "txrun" && r.Repeats != 0 { // its log rows commit with the runs' completion
				t.Fatalf("%d repeats with a TxRunHandler, want none", r.Repeats)
			}
			// At a kill, what repeats is the runs in flight (a run of up to
			// MaxRun events per key in a handler: slots x concurrency of
			// them at most) and progress not yet flushed; a margin of as
			// much again for a loaded machine, as the fault matrix has.
			inFlight := min(keys, slots*conc) * maxRun
			if limit := kills * 2 * inFlight; r.Repeats > limit {
				t.Fatalf("%d repeats after %d kills: more than %d (twice the runs in flight per kill)", r.Repeats, kills, limit)
			}
		})
	}
}
