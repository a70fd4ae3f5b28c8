package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/partitionq/partitionq/internal/freshdb"
)

// Report is everything one run measured.
type Report struct {
	Date     time.Time         `json:"date"`
	Command  string            `json:"command"`
	Machine  map[string]string `json:"machine"`
	Server   map[string]string `json:"server"`
	Config   Config            `json:"config"`
	Duration time.Duration     `json:"duration"`

	Workloads    []WorkloadInfo `json:"workloads"`
	Results      []*Result      `json:"results"`
	Notes        []string       `json:"notes,omitempty"`
	PeersSkipped string         `json:"peers_skipped,omitempty"`
}

// WorkloadInfo describes a workload in the report.
type WorkloadInfo struct {
	Name    string        `json:"name"`
	Title   string        `json:"title"`
	Events  int           `json:"events"`
	Keys    int           `json:"keys"`
	Handler time.Duration `json:"handler"`
	Skew    Skew          `json:"skew"`
}

func newReport(cfg Config, srv *Server) *Report {
	args := append([]string{"pqbench"}, os.Args[1:]...)
	r := &Report{Date: time.Now(), Command: redact(strings.Join(args, " ")), Config: cfg, Machine: machineInfo(), Server: map[string]string{
		"version": srv.Version, "pgq": srv.PgQ, "url": redactConn(srv.AdminURL),
		"pg_stat_statements": fmt.Sprint(srv.Statements), "server_cpu_from_proc": fmt.Sprint(srv.ServerCPUMeasured()),
	}}
	for k, v := range srv.Settings {
		r.Server[k] = v
	}
	return r
}

func (r *Report) note(s string) { r.Notes = append(r.Notes, s) }

func (r *Report) describe(wls ...*Workload) {
	for _, wl := range wls {
		r.Workloads = append(r.Workloads, WorkloadInfo{Name: wl.Name, Title: wl.Title, Events: len(wl.Events), Keys: len(wl.Keys), Handler: wl.Handler, Skew: wl.skew()})
	}
}

func machineInfo() map[string]string {
	m := map[string]string{"nproc": fmt.Sprint(runtime.NumCPU()), "go": runtime.Version(), "os": runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				m["cpu"] = strings.TrimSpace(line[strings.IndexByte(line, ':')+1:])
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb)
		m["memory"] = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m["kernel"] = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("node", "--version").Output(); err == nil {
		m["node"] = strings.TrimSpace(string(out))
	}
	return m
}

// Failures lists the runs that break the bench's own checks: a run that
// did not complete, and any order violation or same-key overlap of
// partitionq, the baseline or the limits (the peers' violations are
// measurements, not failures).
func (r *Report) Failures() []string {
	var out []string
	for _, x := range r.Results {
		ours := x.System == SysPartitionq || x.System == SysBaseline || x.System == SysLimit
		switch {
		case ours && !x.OK():
			out = append(out, fmt.Sprintf("%s %s %s: %s, overlaps %d %s", x.Workload, x.System, x.Config, x.Check, x.Overlaps, x.Err))
		case !ours && x.Err != "":
			out = append(out, fmt.Sprintf("%s %s %s: %s", x.Workload, x.System, x.Config, x.Err))
		}
	}
	return out
}

// ReadReport reads dir/results.json.
func ReadReport(dir string) (*Report, error) {
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return nil, err
	}
	r := &Report{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "results.json"), err)
	}
	return r, nil
}

func (r *Report) write(dir string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.Text()), 0o644); err != nil {
		return err
	}
	if svg := r.chartNSweep(); svg != "" {
		if err := os.WriteFile(filepath.Join(dir, "nsweep.svg"), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	if svg := r.chartLatency(); svg != "" {
		if err := os.WriteFile(filepath.Join(dir, "latency.svg"), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	if svg := r.chartW2(); svg != "" {
		return os.WriteFile(filepath.Join(dir, "w2.svg"), []byte(svg), 0o644)
	}
	return nil
}

// ---------------------------------------------------------------- text

// rows are workload's rows on PgQ (with the engine-independent limits).
func (r *Report) rows(workload string) []*Result { return r.rowsOn(workload, freshdb.PgQ) }

// rowsOn are workload's rows of partitionq and the plain consumer on
// engine, and on PgQ the limits too.
func (r *Report) rowsOn(workload, engine string) []*Result {
	var out []*Result
	for _, x := range r.Results {
		on := x.Engine
		if on == "" {
			on = freshdb.PgQ
		}
		if x.Workload == workload && on == engine {
			out = append(out, x)
		}
	}
	return out
}

// best is partitionq's best rate on workload, on PgQ.
func (r *Report) best(workload string) float64 { return r.bestOn(workload, freshdb.PgQ) }

func (r *Report) bestOn(workload, engine string) float64 {
	b := 0.0
	for _, x := range r.rowsOn(workload, engine) {
		if x.System == SysPartitionq && x.Err == "" {
			b = max(b, x.Rate)
		}
	}
	return b
}

func fnum(v float64) string {
	switch {
	case v < 0:
		return "n/a" // not measured (see costOf)
	case v == 0:
		return "0"
	case v >= 100:
		return commas(int64(v + 0.5))
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + commas(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func (r *Report) measured(v float64, measured bool) string {
	if !measured {
		return "n/a"
	}
	return fnum(v)
}

func orderCell(x *Result) (string, string) {
	if !x.Checked {
		return "–", "–"
	}
	v := fmt.Sprint(x.Check.Violations)
	if x.Overlaps > 0 {
		v += fmt.Sprintf(" (+%d overlaps)", x.Overlaps)
	}
	lost := fmt.Sprint(x.Check.Lost)
	return v, lost
}

// runsBase is the per-event row a run handler's row of the runs step is
// compared with: Handler's for RunHandler, TxHandler's for TxRunHandler.
func (r *Report) runsBase(workload, variant string) *Result {
	want, ok := map[string]string{VariantRunHandler: VariantHandler, VariantTxRunHandler: VariantTxHandler}[variant]
	if !ok {
		return nil
	}
	for _, x := range r.rows(workload) {
		if x.System == SysPartitionq && x.Variant == want && x.Err == "" {
			return x
		}
	}
	return nil
}

// Text renders the report as Markdown.
func (r *Report) Text() string {
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	stmts := r.Server["pg_stat_statements"] == "true"
	cpu := r.Server["server_cpu_from_proc"] == "true"
	w("# pqbench results\n\n")
	w("%s, %s form. Machine: %s CPUs (%s), %s, Linux %s, %s, Node.js %s.\n", r.Date.Format("2006-01-02 15:04 MST"), map[bool]string{true: "short", false: "full"}[r.Config.Short],
		r.Machine["nproc"], r.Machine["cpu"], r.Machine["memory"], r.Machine["kernel"], r.Machine["go"], orDash(r.Machine["node"]))
	if v := r.Server["pgque"]; v != "" {
		w("PgQue %s, in a database of its own, for the tables marked \"on PgQue\".\n", v)
	}
	w("PostgreSQL %s, PgQ %s; shared_buffers %s, fsync %s, synchronous_commit %s, full_page_writes %s; pg_stat_statements %s; server CPU from /proc: %s.\n",
		r.Server["version"], r.Server["pgq"], r.Server["shared_buffers"], r.Server["fsync"], r.Server["synchronous_commit"], r.Server["full_page_writes"],
		map[bool]string{true: "loaded", false: "not loaded (statement time n/a, WAL is the whole cluster's)"}[stmts], map[bool]string{true: "yes", false: "no"}[cpu])
	w("Run took %s. Command: `%s`\n\n", r.Duration.Round(time.Second), r.Command)

	w("## Workloads\n\n| workload | events | keys | handler | payload | busiest key | top 10 keys | fail once |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, wl := range r.Workloads {
		w("| %s: %s | %s | %d | %s | %d B | %s (%d events) | %.1f%% | %d |\n", wl.Name, wl.Title, commas(int64(wl.Events)), wl.Keys, wl.Handler,
			wl.Skew.MeanPayload, wl.Skew.HotKey, wl.Skew.HotEvents, wl.Skew.Top10Share*100, wl.Skew.Fails)
	}
	w("\nRates are events handled per second, from worker start to the last event handled; where a run was repeated (W1: %d trials, interleaved), the median trial is shown with the range of all trials.", r.Config.W1Trials)
	w(" *× best* is the ratio to partitionq's best rate on the workload; *× limit* to the limit for the row's concurrency (W1: one SELECT of the same rows from a plain table; W2, W3: min(concurrency, keys) / handler time, and no faster than the busiest key's events and retries one after another). Violations and lost events are counted by internal/ordercheck from each system's handling log; overlaps are handler calls that started while another call of the same key was running. Costs are per event handled: heap rows read (pg_stat_all_tables), server CPU (all server processes, /proc), statement time and WAL (pg_stat_statements of the system's database), client CPU (the consumer process).\n\n")

	for _, t := range []struct{ name, engine, title string }{{"W1", freshdb.PgQ, "W1"}, {"W2", freshdb.PgQ, "W2"}, {"W3", freshdb.PgQ, "W3"}, {"W1", freshdb.PgQue, "W1 on PgQue"}} {
		name := t.name
		rows := r.rowsOn(name, t.engine)
		if len(rows) == 0 {
			continue
		}
		best := r.bestOn(name, t.engine)
		floor := 0.0 // W1: the plain SELECT (on PgQ's database) is every row's limit
		for _, x := range r.rows(name) {
			if name == "W1" && x.System == SysLimit {
				floor = x.Rate
			}
		}
		w("## %s\n\n| system | config | events | events/s | × best | × limit | violations | lost | rows read/ev | server CPU µs/ev | stmt µs/ev | WAL B/ev | client CPU µs/ev |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n", t.title)
		for _, x := range rows {
			v, lost := orderCell(x)
			w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", x.System, x.Config+errSuffix(x), commas(int64(x.Events)), rateCell(x),
				ratio(x.Rate, best), ratio(x.Rate, max(x.Limit, floor)), v, lost, fnum(x.Cost.RowsRead), r.measured(x.Cost.ServerCPU, cpu),
				r.measured(x.Cost.ExecUS, stmts), fnum(x.Cost.WALBytes), fnum(x.Cost.ClientCPU))
		}
		w("\n")
	}

	for _, name := range []string{"runs-few", "runs-burst"} {
		rows := r.rows(name)
		if len(rows) == 0 {
			continue
		}
		w("## Handlers that write: %s\n\n| handler | config | events | events/s | × per event | violations | lost | server CPU µs/ev | WAL B/ev | client CPU µs/ev |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n", name)
		for _, x := range rows {
			v, lost := orderCell(x)
			per := "-"
			if base := r.runsBase(name, x.Variant); base != nil {
				per = ratio(x.Rate, base.Rate)
			}
			kind := x.Variant
			if kind == VariantHandler {
				kind = "Handler"
			}
			w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", kind, x.Config+errSuffix(x), commas(int64(x.Events)), fnum(x.Rate), per, v, lost,
				r.measured(x.Cost.ServerCPU, cpu), fnum(x.Cost.WALBytes), fnum(x.Cost.ClientCPU))
		}
		w("\n")
	}

	copyRate := 0.0
	for _, x := range r.rows("producer") {
		if x.System == SysLimit {
			copyRate = x.Rate
		}
	}
	for _, t := range []struct{ engine, title string }{{freshdb.PgQ, "Producer"}, {freshdb.PgQue, "Producer on PgQue"}} {
		rows := r.rowsOn("producer", t.engine)
		if len(rows) == 0 {
			continue
		}
		w("## %s\n\n| system | how | events | events/s | × COPY | server CPU µs/ev | stmt µs/ev | WAL B/ev | client CPU µs/ev |\n|---|---|--:|--:|--:|--:|--:|--:|--:|\n", t.title)
		for _, x := range rows {
			w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", x.System, x.Config+errSuffix(x), commas(int64(x.Events)), fnum(x.Rate), ratio(x.Rate, copyRate),
				r.measured(x.Cost.ServerCPU, cpu), r.measured(x.Cost.ExecUS, stmts), fnum(x.Cost.WALBytes), fnum(x.Cost.ClientCPU))
		}
		w("\n")
	}

	if rows := r.rows("latency"); len(rows) > 0 {
		w("## Latency (send to handler, %d events/s for %s)\n\n| system | config | events | p50 ms | p90 ms | p99 ms | max ms | violations | lost | engine batches/s | server CPU µs/ev | WAL B/ev | peak connections |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
			r.Config.LatRate, r.Config.LatDuration)
		for _, x := range rows {
			v, lost := orderCell(x)
			l := x.Lat
			if l == nil {
				l = &Latency{}
			}
			batches := "-"
			if x.BatchesPerSec > 0 {
				batches = fnum(x.BatchesPerSec)
			}
			cfg := x.Config + errSuffix(x)
			if x.Note != "" {
				cfg += " (" + x.Note + ")"
			}
			w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", x.System, cfg, commas(int64(x.Events)), ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max),
				v, lost, batches, r.measured(x.Cost.ServerCPU, cpu), fnum(x.Cost.WALBytes), conns(x))
		}
		w("\n")
	}

	if rows := r.rows("resize"); len(rows) > 0 {
		w("## Resize (an online split while a producer sends)\n\n| system | config | events | new generation handling after | resize complete after | producer events/s before | during | × | latency p99 ms | violations | lost | overlaps |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, x := range rows {
			v, lost := orderCell(x)
			rs := x.Resize
			if rs == nil {
				rs = &ResizeStats{}
			}
			p99 := "-"
			if x.Lat != nil {
				p99 = ms(x.Lat.P99)
			}
			w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", x.System, x.Config+errSuffix(x), commas(int64(x.Events)),
				rs.FirstNew.Round(time.Millisecond), rs.Complete.Round(time.Millisecond), fnum(rs.RateBefore), fnum(rs.RateDuring), ratio(rs.RateDuring, rs.RateBefore),
				p99, v, lost, x.Overlaps)
		}
		w("\n")
	}

	if rows := r.rows("scale"); len(rows) > 0 {
		w("## Scaling out (identical workers share the slots, each bounded to its handler calls at once)\n\n| system | config | events | events/s | × one worker | bound events/s | violations | lost | overlaps |\n|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
		var one float64
		for _, x := range rows {
			if x.Workers == 1 {
				one = x.Rate
			}
			v, lost := orderCell(x)
			w("| %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", x.System, x.Config+errSuffix(x), commas(int64(x.Events)), fnum(x.Rate),
				ratio(x.Rate, one), fnum(x.Limit), v, lost, x.Overlaps)
		}
		w("\n")
	}
	if rows := r.rows("rolling"); len(rows) > 0 {
		w("## Rolling restart (identical workers replaced one at a time while a producer sends)\n\n| system | config | events | restart took | p50 / p99 ms before | p50 / p99 ms during | p99 × | violations | lost | overlaps |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, x := range rows {
			v, lost := orderCell(x)
			rs := x.Rolling
			if rs == nil {
				rs = &RollingStats{Steady: &Latency{}, During: &Latency{}}
			}
			cfg := x.Config + errSuffix(x)
			if x.Note != "" {
				cfg += " (" + x.Note + ")"
			}
			w("| %s | %s | %s | %s | %s / %s | %s / %s | %s | %s | %s | %d |\n", x.System, cfg, commas(int64(x.Events)), rs.Took.Round(time.Millisecond),
				ms(rs.Steady.P50), ms(rs.Steady.P99), ms(rs.During.P50), ms(rs.During.P99), ratio(float64(rs.During.P99), float64(rs.Steady.P99)), v, lost, x.Overlaps)
		}
		w("\n")
	}

	r.nSweep(&sb)
	r.targets(&sb)
	if len(r.Notes) > 0 {
		w("## Notes\n\n")
		for _, n := range r.Notes {
			w("- %s\n", n)
		}
		w("\n")
	}
	return sb.String()
}

// rateCell is the rate, with the range of the trials when there were several.
func rateCell(x *Result) string {
	if len(x.Trials) < 2 {
		return fnum(x.Rate)
	}
	lo, hi := x.Trials[0], x.Trials[0]
	for _, t := range x.Trials {
		lo, hi = min(lo, t), max(hi, t)
	}
	return fmt.Sprintf("%s (%s–%s)", fnum(x.Rate), short(lo), short(hi))
}

// short writes a rate in thousands.
func short(v float64) string {
	if v >= 10_000 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fnum(v)
}

func errSuffix(x *Result) string {
	if x.Err == "" {
		return ""
	}
	return " **(" + x.Err + ")**"
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// conns is a run's peak connections; – when not sampled (peers).
func conns(x *Result) string {
	if x.PeakConns == 0 {
		return "–"
	}
	return fmt.Sprint(x.PeakConns)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

// sweepRows are W1's runs of one worker with the default variant, by N,
// and the plain consumer's run.
func (r *Report) sweepRows() (base *Result, sweep []*Result) {
	for _, x := range r.rows("W1") {
		switch {
		case x.System == SysBaseline:
			base = x
		case x.System == SysPartitionq && x.Workers <= 1 && x.Variant == "":
			sweep = append(sweep, x)
		}
	}
	sort.SliceStable(sweep, func(i, j int) bool { return sweep[i].N < sweep[j].N })
	return base, sweep
}

// nSweep writes W1's N sweep: what each N costs, beside the plain consumer,
// then the slots split over several workers, the variants, and the workers
// at rest.
func (r *Report) nSweep(sb *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	cpu := r.Server["server_cpu_from_proc"] == "true"
	stmts := r.Server["pg_stat_statements"] == "true"
	base, sweep := r.sweepRows()
	var multi, variants []*Result
	for _, x := range r.rows("W1") {
		if x.System == SysPartitionq && x.Workers > 1 {
			multi = append(multi, x)
		}
		if x.System == SysPartitionq && x.Variant != "" {
			variants = append(variants, x)
		}
	}
	baseRate := 0.0
	if base != nil {
		baseRate = base.Rate
	}
	if len(sweep)+len(multi) > 0 {
		w("## N sweep (W1: the backlog drained by one worker with N slots, c = %d)\n\n", r.Config.SweepConc)
		w("| N | config | events/s | × plain | rows read/ev | of which partitionq's tables | server CPU µs/ev | client CPU µs/ev | peak connections |\n|--:|---|--:|--:|--:|--:|--:|--:|--:|\n")
		if base != nil {
			w("| plain | %s%s | %s | 1.00× | %s | %s | %s | %s | 1 |\n", base.System, errSuffix(base), rateCell(base), fnum(base.Cost.RowsRead), fnum(base.Cost.RowsOwn),
				r.measured(base.Cost.ServerCPU, cpu), fnum(base.Cost.ClientCPU))
		}
		for _, x := range append(append([]*Result(nil), sweep...), multi...) {
			w("| %d | %s%s | %s | %s | %s | %s | %s | %s | %d |\n", x.N, x.Config, errSuffix(x), rateCell(x), ratio(x.Rate, baseRate), fnum(x.Cost.RowsRead), fnum(x.Cost.RowsOwn),
				r.measured(x.Cost.ServerCPU, cpu), fnum(x.Cost.ClientCPU), x.PeakConns)
		}
		w("\n")
	}
	if len(variants) > 0 {
		var ref *Result
		for _, x := range sweep {
			if x.N == variants[0].N && x.Conc == variants[0].Conc {
				ref = x
			}
		}
		w("## Handler variants (W1, N = %d, c = %d)\n\n| variant | events/s | × Handler | WAL B/ev | server CPU µs/ev | stmt µs/ev | client CPU µs/ev | peak connections |\n|---|--:|--:|--:|--:|--:|--:|--:|\n",
			variants[0].N, variants[0].Conc)
		list := variants
		if ref != nil {
			list = append([]*Result{ref}, variants...)
		}
		refRate := 0.0
		if ref != nil {
			refRate = ref.Rate
		}
		for _, x := range list {
			name := x.Variant
			if name == "" {
				name = "Handler (progress recorded: the default)"
			}
			w("| %s%s | %s | %s | %s | %s | %s | %s | %d |\n", name, errSuffix(x), rateCell(x), ratio(x.Rate, refRate), fnum(x.Cost.WALBytes),
				r.measured(x.Cost.ServerCPU, cpu), r.measured(x.Cost.ExecUS, stmts), fnum(x.Cost.ClientCPU), x.PeakConns)
		}
		w("\n")
	}
	if rows := r.rows("idle"); len(rows) > 0 {
		w("## At rest (a worker whose slots have nothing to do)\n\n| worker | window | transactions | transactions/s (less no worker) | no worker, /s | connections |\n|---|--:|--:|--:|--:|--:|\n")
		for _, x := range rows {
			if x.Idle == nil {
				continue
			}
			w("| %s%s | %s | %d | %.1f | %.1f | %d |\n", x.Config, errSuffix(x), x.Idle.Window, x.Idle.Xacts, x.Idle.TPS, x.Idle.BaselineTPS, x.Idle.Conns)
		}
		w("\n")
	}
}

// targets checks the targets against this run.
func (r *Report) targets(sb *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(sb, format, args...) }
	find := func(workload, system, config string) *Result {
		for _, x := range r.rows(workload) {
			if x.System == system && (config == "" || strings.HasPrefix(x.Config, config)) {
				return x
			}
		}
		return nil
	}
	ratio := func(a, b float64) string { // three places: 0.796 is not 0.8
		if a == 0 || b == 0 {
			return "–"
		}
		return fmt.Sprintf("%.3f×", a/b)
	}
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	w("## Targets\n\n| target | measured | verdict |\n|---|---|---|\n")
	if x := find("W1", SysBaseline, ""); x != nil {
		w("| plain single consumer drains W1 at ~650,000/s (reference) | %s/s | %s of the reference |\n", fnum(x.Rate), ratio(x.Rate, 650_000))
	}
	if x := find("producer", SysPartitionq, "SendBatch"); x != nil {
		w("| batched insert_event ~100,000/s (reference) | SendBatch %s/s | %s of the reference |\n", fnum(x.Rate), ratio(x.Rate, 100_000))
	}
	if x := find("producer", SysLimit, ""); x != nil {
		w("| COPY ~1,400,000 rows/s (reference) | %s/s | %s of the reference |\n", fnum(x.Rate), ratio(x.Rate, 1_400_000))
	}
	if sb2, cp := find("producer", SysPartitionq, "SendBatch"), find("producer", SysLimit, ""); sb2 != nil && cp != nil && cp.Rate > 0 {
		w("| batch send ≥ 0.25× COPY | %s | %s |\n", ratio(sb2.Rate, cp.Rate), mark(sb2.Rate >= 0.25*cp.Rate))
	}
	if plain, once := find("producer", SysPartitionq, "SendBatch of 1,000 a call"), find("producer", SysPartitionq, "SendBatch of 1,000 a call, each with a dedup id"); plain != nil && once != nil && plain.Rate > 0 {
		w("| send once: SendBatch of 1,000 with dedup ids ≥ 0.5× without | %s (%s/s against %s/s; WAL %s against %s B/ev) | %s |\n", ratio(once.Rate, plain.Rate),
			fnum(once.Rate), fnum(plain.Rate), fnum(once.Cost.WALBytes), fnum(plain.Cost.WALBytes), mark(once.Err == "" && once.Rate >= 0.5*plain.Rate))
		if tx := find("producer", SysPartitionq, "SendBatchTx of 1,000"); tx != nil && tx.Rate > 0 {
			w("| send once against SendBatchTx of 1,000 (both COPY; reported) | %s (%s/s against %s/s) | – |\n", ratio(once.Rate, tx.Rate), fnum(once.Rate), fnum(tx.Rate))
		}
	}
	if base, sweep := r.sweepRows(); base != nil && base.Rate > 0 {
		for _, x := range sweep {
			switch x.N {
			case 1:
				w("| W1, N = 1 ≥ 0.9× the plain consumer | %s (%s/s against %s/s) | %s |\n", ratio(x.Rate, base.Rate), fnum(x.Rate), fnum(base.Rate), mark(x.Err == "" && x.Rate >= 0.9*base.Rate))
			case 64:
				w("| W1, N = 64, one worker ≥ 0.8× the plain consumer | %s (%s/s) | %s |\n", ratio(x.Rate, base.Rate), fnum(x.Rate), mark(x.Err == "" && x.Rate >= 0.8*base.Rate))
				w("| W1, N = 64, one worker ≤ 1.5 rows read per event | %s | %s |\n", fnum(x.Cost.RowsRead), mark(x.Err == "" && x.Cost.RowsRead <= 1.5))
			case 256:
				w("| W1, N = 256 runs and is reported | %s/s, %s rows read/ev, %d connections | %s |\n", fnum(x.Rate), fnum(x.Cost.RowsRead), x.PeakConns, mark(x.OK()))
			}
		}
	}
	for _, x := range r.rows("W1") {
		if x.System == SysPartitionq && x.Workers > 1 {
			w("| W1, %s ≤ %.1f rows read per event | %s | %s |\n", x.Config, 1.125*float64(x.Workers), fnum(x.Cost.RowsRead), mark(x.Err == "" && x.Cost.RowsRead <= 1.125*float64(x.Workers)))
		}
	}
	for _, x := range r.rows("idle") {
		if x.Idle != nil {
			w("| at rest, %s: ≤ 5 transactions/s per worker (connections reported) | %.1f/s, %d connections | %s |\n", x.Config, x.Idle.TPS, x.Idle.Conns, mark(x.Idle.TPS <= 5))
		}
	}
	var bossP99 time.Duration // pg-boss's latency in this run, when measured
	for _, x := range r.rows("latency") {
		if x.System == SysPgBoss && x.Lat != nil && x.Err == "" {
			bossP99 = x.Lat.P99
		}
	}
	for _, x := range r.rows("latency") {
		if x.System != SysPartitionq || x.Lat == nil {
			continue
		}
		switch {
		case strings.Contains(x.Config, "lowest ticks"):
			target := latencyTargetP99
			what := fmt.Sprintf("≤ %d ms", latencyTargetP99.Milliseconds())
			if bossP99 > 0 {
				target = min(target, bossP99)
				what += fmt.Sprintf(" and below pg-boss's %s ms", ms(bossP99))
			}
			w("| latency p99 %s, %s | %s ms | %s |\n", what, x.Config, ms(x.Lat.P99), mark(x.Err == "" && x.Lat.P99 <= target))
			if x.N >= 256 {
				w("| engine batches opened ≤ 2,000/s (2 per event at most), %s | %s/s | %s |\n", x.Config, fnum(x.BatchesPerSec), mark(x.BatchesPerSec > 0 && x.BatchesPerSec <= 2000))
			}
		case strings.Contains(x.Config, "default ticks"):
			w("| latency p99 ≤ 250 ms with every default, %s | %s ms | %s |\n", x.Config, ms(x.Lat.P99), mark(x.Err == "" && x.Lat.P99 <= 250*time.Millisecond))
		}
	}
	for _, x := range r.rows("resize") {
		if rs := x.Resize; rs != nil {
			w("| resize %s: the new generation handles events within 5 s | %s | %s |\n", x.Config, rs.FirstNew.Round(time.Millisecond), mark(x.OK() && rs.FirstNew > 0 && rs.FirstNew <= 5*time.Second))
			w("| resize %s: the producer's rate during it ≥ 0.9× before it | %s | %s |\n", x.Config, ratio(rs.RateDuring, rs.RateBefore), mark(rs.RateBefore > 0 && rs.RateDuring >= 0.9*rs.RateBefore))
		}
	}
	for _, x := range r.rows("W2") {
		if x.System == SysPartitionq && x.N*x.Conc <= 64 {
			ideal := float64(x.N*x.Conc) / r.Config.W2Handler.Seconds()
			w("| W2 %s ≥ 0.8× ideal (%s/s) | %s/s = %s | %s |\n", x.Config, fnum(ideal), fnum(x.Rate), ratio(x.Rate, ideal), mark(x.Rate >= 0.8*ideal))
		}
	}
	for _, x := range r.rows("W3") {
		if x.System == SysPartitionq && !strings.Contains(x.Config, "drains") && x.Limit > 0 {
			w("| W3 %s with the worker's default drains ≥ 0.8× its limit (%s/s) | %s/s = %s | %s |\n", x.Config, fnum(x.Limit), fnum(x.Rate), ratio(x.Rate, x.Limit),
				mark(x.OK() && x.Rate >= 0.8*x.Limit))
		}
	}
	for _, x := range r.rows("runs-burst") {
		base := r.runsBase("runs-burst", x.Variant)
		switch {
		case base == nil:
		case x.Variant == VariantRunHandler:
			w("| runs-burst: RunHandler ≥ 5× Handler | %s/s vs %s/s = %s | %s |\n", fnum(x.Rate), fnum(base.Rate), ratio(x.Rate, base.Rate), mark(x.OK() && x.Rate >= 5*base.Rate))
		case x.Variant == VariantTxRunHandler:
			w("| runs-burst: TxRunHandler ≥ 10× TxHandler | %s/s vs %s/s = %s | %s |\n", fnum(x.Rate), fnum(base.Rate), ratio(x.Rate, base.Rate), mark(x.OK() && x.Rate >= 10*base.Rate))
		}
	}
	for _, wlName := range []string{"W2", "W3"} {
		best := r.best(wlName)
		for _, peer := range []string{SysPgBoss, SysGraphile} {
			pb := 0.0
			for _, x := range r.rows(wlName) {
				if x.System == peer && x.Err == "" {
					pb = max(pb, x.Rate)
				}
			}
			if pb > 0 {
				w("| %s: ahead of %s (best against best) | %s/s vs %s/s = %s | %s |\n", wlName, peer, fnum(best), fnum(pb), ratio(best, pb), mark(best > pb))
			}
		}
	}
	viol := 0
	for _, x := range r.Results {
		if x.System == SysPartitionq && x.Checked {
			viol += x.Check.Violations + x.Check.Lost + int(x.Overlaps)
		}
	}
	w("| partitionq: zero order violations, nothing lost | %d violations, losses or overlaps in all runs | %s |\n\n", viol, mark(viol == 0))
}
