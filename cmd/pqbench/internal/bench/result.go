package bench

import (
	"time"

	"github.com/partitionq/partitionq/internal/ordercheck"
)

// Systems, as named in the tables.
const (
	SysPartitionq = "partitionq"
	SysBaseline   = "baseline (one consumer)"
	SysLimit      = "limit"
	SysPgBoss     = "pg-boss"
	SysGraphile   = "graphile-worker"
)

// Result is one measured run.
type Result struct {
	Workload string `json:"workload"` // W1, W2, W3, producer, latency
	System   string `json:"system"`
	Config   string `json:"config"`
	N        int    `json:"n,omitempty"`
	Conc     int    `json:"conc,omitempty"`
	// Workers is how many workers the N slots were split over (W1's
	// several-workers row); Variant the worker option measured (pqRun).
	Workers int    `json:"workers,omitempty"`
	Variant string `json:"variant,omitempty"`
	// Engine is the queue engine of partitionq's and the plain consumer's
	// rows: "pgq" ("" in reports from before PgQue was measured) or "pgque".
	Engine string `json:"engine,omitempty"`

	Events  int     `json:"events"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"` // events per second

	// Checked is false for rows the order checker does not apply to
	// (physical limits, producers).
	Checked  bool              `json:"checked"`
	Check    ordercheck.Report `json:"check"`
	Overlaps int64             `json:"overlaps"`

	Cost Cost `json:"cost"`
	// PeakConns is the most connections to the run's database seen while
	// it ran (pg_stat_activity, sampled every 50ms): the worker's own pool
	// and the client's pool it was given, of every worker of the run.
	PeakConns int `json:"peak_conns,omitempty"`
	// Idle is the at-rest measurement of the idle rows.
	Idle *Idle    `json:"idle,omitempty"`
	Lat  *Latency `json:"latency,omitempty"`
	// BatchesPerSec is the engine batches opened a second during a
	// latency run (all slots).
	BatchesPerSec float64 `json:"batches_per_s,omitempty"`
	// Resize is what the resize row measured; Rolling the rolling
	// restart's.
	Resize  *ResizeStats  `json:"resize,omitempty"`
	Rolling *RollingStats `json:"rolling,omitempty"`

	// Limit is the rate this row is compared with (the physical or ideal
	// limit for its concurrency); 0 when none applies.
	Limit float64 `json:"limit,omitempty"`
	// SleepMean is the mean measured length of the handler's wait.
	SleepMean time.Duration `json:"sleep_mean,omitempty"`
	// Trials holds every trial's rate when the run was repeated (Rate is
	// the median's).
	Trials []float64 `json:"trials,omitempty"`
	Note   string    `json:"note,omitempty"`
	Err    string    `json:"error,omitempty"`
}

// OK reports a complete run without order violations or overlaps.
func (r *Result) OK() bool {
	return r.Err == "" && (!r.Checked || (r.Check.OK() && r.Overlaps == 0))
}

func rate(events int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(events) / d.Seconds()
}

// Idle is what a worker with idle slots costs the server at rest.
type Idle struct {
	Window      time.Duration `json:"window"`
	Xacts       int64         `json:"xacts"`        // transactions (commits and rollbacks) of the database in the window
	BaselineTPS float64       `json:"baseline_tps"` // the database's transactions/s with no worker
	TPS         float64       `json:"tps"`          // the worker's: Xacts/Window minus BaselineTPS
	Conns       int           `json:"conns"`        // connections to the database at rest
	Ticker      bool          `json:"ticker"`       // the worker ran partitionq's ticker
}
