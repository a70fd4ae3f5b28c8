package bench

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strings"
	"time"
)

// chartW2 draws W2's throughput against N × concurrency (both axes
// logarithmic) with the ideal line min(N×c, keys) / handler time, as SVG.
func (r *Report) chartW2() string {
	rows := r.rows("W2")
	if len(rows) == 0 || r.Config.W2Handler <= 0 {
		return ""
	}
	const (
		width, height          = 860, 500
		left, right, top, bott = 80, 250, 40, 60
	)
	pw, ph := float64(width-left-right), float64(height-top-bott)
	keys := float64(r.Config.W2Keys)
	ideal := func(x float64) float64 { return math.Min(x, keys) / r.Config.W2Handler.Seconds() }

	maxX := 1.0
	minY, maxY := math.Inf(1), 0.0
	for _, x := range rows {
		if x.Rate <= 0 || x.Conc == 0 {
			continue
		}
		c := float64(max(1, x.N) * x.Conc)
		if x.System != SysPartitionq {
			c = float64(x.Conc)
		}
		maxX = math.Max(maxX, c)
		minY, maxY = math.Min(minY, x.Rate), math.Max(maxY, x.Rate)
	}
	maxX = math.Pow(2, math.Ceil(math.Log2(maxX)))
	maxY = math.Max(maxY, ideal(maxX))
	minY = math.Min(minY, ideal(1))
	y0, y1 := math.Floor(math.Log10(minY)), math.Ceil(math.Log10(maxY))
	x1 := math.Log2(maxX)
	px := func(x float64) float64 { return float64(left) + math.Log2(x)/x1*pw }
	py := func(y float64) float64 { return float64(top) + ph - (math.Log10(y)-y0)/(y1-y0)*ph }

	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	w(`<text x="%d" y="22" font-size="14" font-weight="bold">W2 (%s events, %d keys, handler waits %s): throughput against handlers at once</text>`+"\n",
		left, commas(int64(r.Config.W2Events)), r.Config.W2Keys, r.Config.W2Handler)
	// Grid and axes.
	for e := y0; e <= y1; e++ {
		y := py(math.Pow(10, e))
		w(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, float64(left)+pw, y)
		w(`<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y, commas(int64(math.Pow(10, e))))
	}
	for e := 0.0; e <= x1; e++ {
		x := px(math.Pow(2, e))
		w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, top, x, float64(top)+ph)
		w(`<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x, float64(top)+ph+16, int(math.Pow(2, e)))
	}
	w(`<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	w(`<text x="%.1f" y="%d" text-anchor="middle">handlers at once (N slots × in-slot concurrency; peers: their concurrency)</text>`+"\n", float64(left)+pw/2, height-18)
	w(`<text transform="translate(18,%.1f) rotate(-90)" text-anchor="middle">events per second</text>`+"\n", float64(top)+ph/2)

	// The ideal line, sampled along the log axis.
	var pts []string
	for i := 0; i <= 64; i++ {
		x := math.Pow(2, x1*float64(i)/64)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(x), py(ideal(x))))
	}
	w(`<polyline points="%s" fill="none" stroke="#999" stroke-width="2" stroke-dasharray="6 4"/>`+"\n", strings.Join(pts, " "))

	colors := []string{"#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd", "#8c564b"}
	type legend struct{ label, color, shape string }
	var legends []legend
	legends = append(legends, legend{fmt.Sprintf("ideal: min(N×c, %d) / %s", r.Config.W2Keys, r.Config.W2Handler), "#999", "dash"})

	// partitionq: one line per N.
	byN := map[int][]*Result{}
	for _, x := range rows {
		if x.System == SysPartitionq && x.Rate > 0 {
			byN[x.N] = append(byN[x.N], x)
		}
	}
	var ns []int
	for n := range byN {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	for i, n := range ns {
		col := colors[i%len(colors)]
		list := byN[n]
		sort.Slice(list, func(a, b int) bool { return list[a].Conc < list[b].Conc })
		var line []string
		for _, x := range list {
			cx, cy := px(float64(n*x.Conc)), py(x.Rate)
			line = append(line, fmt.Sprintf("%.1f,%.1f", cx, cy))
			w(`<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s"><title>%s</title></circle>`+"\n", cx, cy, col,
				html.EscapeString(fmt.Sprintf("partitionq %s: %s/s", x.Config, fnum(x.Rate))))
		}
		w(`<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.Join(line, " "), col)
		legends = append(legends, legend{fmt.Sprintf("partitionq N=%d (c = %s)", n, concList(list)), col, "circle"})
	}
	// Everything else as markers.
	others := []struct {
		system, color, shape, label string
		match                       func(*Result) bool
	}{
		{SysBaseline, "#000", "square", "plain single consumer", func(x *Result) bool { return true }},
		{SysLimit, "#777", "cross", "handler alone (no database)", func(x *Result) bool { return true }},
		{SysPgBoss, "#e377c2", "triangle", "pg-boss (key_strict_fifo)", func(x *Result) bool { return !strings.Contains(x.Config, "bulk") }},
		{SysGraphile, "#17becf", "diamond", "graphile-worker (queue per key)", func(x *Result) bool { return !strings.Contains(x.Config, "bulk") }},
	}
	for _, o := range others {
		any := false
		for _, x := range rows {
			if x.System != o.system || x.Rate <= 0 || !o.match(x) {
				continue
			}
			c := float64(x.Conc)
			if x.System == SysBaseline {
				c = 1
			}
			any = true
			w("%s\n", marker(o.shape, px(c), py(x.Rate), o.color, fmt.Sprintf("%s %s: %s/s", x.System, x.Config, fnum(x.Rate))))
		}
		if any {
			legends = append(legends, legend{o.label, o.color, o.shape})
		}
	}
	// Legend.
	lx, ly := float64(width-right+14), float64(top+10)
	for i, l := range legends {
		y := ly + float64(i)*20
		if l.shape == "dash" {
			w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6 4"/>`+"\n", lx, y, lx+18, y, l.color)
		} else {
			w("%s\n", marker(l.shape, lx+9, y, l.color, ""))
		}
		w(`<text x="%.1f" y="%.1f" dominant-baseline="middle" font-size="11">%s</text>`+"\n", lx+24, y, html.EscapeString(l.label))
	}
	w("</svg>\n")
	return sb.String()
}

func concList(list []*Result) string {
	var s []string
	for _, x := range list {
		s = append(s, fmt.Sprint(x.Conc))
	}
	return strings.Join(s, ", ")
}

func marker(shape string, x, y float64, color, title string) string {
	t := ""
	if title != "" {
		t = "<title>" + html.EscapeString(title) + "</title>"
	}
	switch shape {
	case "square":
		return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="9" height="9" fill="%s">%s</rect>`, x-4.5, y-4.5, color, t)
	case "triangle":
		return fmt.Sprintf(`<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s">%s</polygon>`, x, y-6, x-5.5, y+4.5, x+5.5, y+4.5, color, t)
	case "diamond":
		return fmt.Sprintf(`<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s">%s</polygon>`, x, y-6, x+6, y, x, y+6, x-6, y, color, t)
	case "cross":
		return fmt.Sprintf(`<path d="M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f" stroke="%s" stroke-width="2.5">%s</path>`, x-5, y-5, x+5, y+5, x-5, y+5, x+5, y-5, color, t)
	}
	return fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s">%s</circle>`, x, y, color, t)
}

// chartNSweep draws W1's N sweep as SVG: events per second against N
// (beside the plain consumer's rate), and rows read per event with the
// worker's peak connections written at each point.
func (r *Report) chartNSweep() string {
	base, sweep := r.sweepRows()
	var pts []*Result
	for _, x := range sweep {
		if x.Rate > 0 && x.N > 0 {
			pts = append(pts, x)
		}
	}
	if len(pts) == 0 {
		return ""
	}
	const (
		width, height      = 900, 420
		panelW, gap        = 340, 110
		left, top, bottom  = 80, 50, 70
		colPQ, colBase     = "#1f77b4", "#000"
		colTarget, colConn = "#d62728", "#555"
	)
	ph := float64(height - top - bottom)
	maxN := 1.0
	maxRate, maxRows := 0.0, 1.0
	for _, x := range pts {
		maxN = math.Max(maxN, float64(x.N))
		maxRate = math.Max(maxRate, x.Rate)
		maxRows = math.Max(maxRows, x.Cost.RowsRead)
	}
	baseRate, baseRows := 0.0, 0.0
	if base != nil {
		baseRate, baseRows = base.Rate, base.Cost.RowsRead
		maxRate = math.Max(maxRate, baseRate)
	}
	x1 := math.Max(1, math.Ceil(math.Log2(maxN)))
	yRate := niceCeil(maxRate * 1.1)
	yRows := niceCeil(maxRows * 1.2)

	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	w(`<text x="%d" y="22" font-size="14" font-weight="bold">W1 (%s events, %d keys, no-op handler, one worker, c = %d): what N costs</text>`+"\n",
		left, commas(int64(r.Config.W1Events)), r.Config.W1Keys, r.Config.SweepConc)

	panel := func(x0 float64, title string, yMax float64, val func(*Result) float64, ref float64, refLabel string, target float64, targetLabel string, note func(*Result) string) {
		px := func(n float64) float64 { return x0 + math.Log2(n)/x1*panelW }
		py := func(v float64) float64 { return float64(top) + ph - v/yMax*ph }
		w(`<text x="%.1f" y="%d" font-weight="bold">%s</text>`+"\n", x0, top-12, html.EscapeString(title))
		for i := 0; i <= 5; i++ {
			v := yMax * float64(i) / 5
			y := py(v)
			w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x0+panelW, y)
			w(`<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", x0-6, y, fnum(v))
		}
		for e := 0.0; e <= x1; e++ {
			x := px(math.Pow(2, e))
			w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, top, x, float64(top)+ph)
			w(`<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x, float64(top)+ph+16, int(math.Pow(2, e)))
		}
		w(`<rect x="%.1f" y="%d" width="%d" height="%.1f" fill="none" stroke="#333"/>`+"\n", x0, top, panelW, ph)
		w(`<text x="%.1f" y="%.1f" text-anchor="middle">N (slots, one worker)</text>`+"\n", x0+panelW/2, float64(top)+ph+36)
		if ref > 0 {
			w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", x0, py(ref), x0+panelW, py(ref), colBase)
			w(`<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", x0+panelW-4, py(ref)-5, html.EscapeString(refLabel))
		}
		if target > 0 {
			w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1" stroke-dasharray="2 3"/>`+"\n", x0, py(target), x0+panelW, py(target), colTarget)
			w(`<text x="%.1f" y="%.1f" font-size="11" text-anchor="end" fill="%s">%s</text>`+"\n", x0+panelW-4, py(target)+13, colTarget, html.EscapeString(targetLabel))
		}
		var line []string
		for _, x := range pts {
			cx, cy := px(float64(x.N)), py(val(x))
			line = append(line, fmt.Sprintf("%.1f,%.1f", cx, cy))
			w(`<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s"><title>%s</title></circle>`+"\n", cx, cy, colPQ,
				html.EscapeString(fmt.Sprintf("partitionq %s: %s/s, %s rows read/event, %d connections", x.Config, fnum(x.Rate), fnum(x.Cost.RowsRead), x.PeakConns)))
			if note != nil {
				w(`<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle" fill="%s">%s</text>`+"\n", cx, cy-9, colConn, html.EscapeString(note(x)))
			}
		}
		w(`<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.Join(line, " "), colPQ)
	}
	panel(float64(left), "events per second", yRate, func(x *Result) float64 { return x.Rate },
		baseRate, "plain consumer "+fnum(baseRate)+"/s", 0.8*baseRate, "0.8× plain", nil)
	panel(float64(left+panelW+gap), "rows read per event (label: peak connections)", yRows, func(x *Result) float64 { return x.Cost.RowsRead },
		baseRows, "plain consumer", 0, "", func(x *Result) string { return fmt.Sprintf("%d conns", x.PeakConns) })
	w("</svg>\n")
	return sb.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// latencyTargetP99 is the p99 the latency step aims at, at the lowest tick
// settings, whatever N (docs/benchmarks.md, Latency): the targets' check
// and the latency chart.
const latencyTargetP99 = 25 * time.Millisecond

// chartLatency draws the latency step as SVG: partitionq's send-to-handler
// p50 and p99 at the lowest tick settings against N, its p99 with every
// default, and the peers' p99 and the target as lines (both axes
// logarithmic).
func (r *Report) chartLatency() string {
	var fast []*Result
	var def *Result
	var peers []*Result
	for _, x := range r.rows("latency") {
		if x.Lat == nil || x.Err != "" || x.Lat.Count == 0 {
			continue
		}
		switch {
		case x.System == SysPartitionq && strings.Contains(x.Config, "lowest ticks"):
			fast = append(fast, x)
		case x.System == SysPartitionq && strings.Contains(x.Config, "default ticks"):
			def = x
		case x.System == SysPgBoss || x.System == SysGraphile:
			peers = append(peers, x)
		}
	}
	if len(fast) == 0 {
		return ""
	}
	sort.SliceStable(fast, func(i, j int) bool { return fast[i].N < fast[j].N })
	msOf := func(d time.Duration) float64 { return math.Max(float64(d)/float64(time.Millisecond), 0.1) }
	const (
		width, height           = 760, 440
		left, top, right, below = 80, 50, 230, 70
		colP50, colP99, colDef  = "#1f77b4", "#d62728", "#2ca02c"
		colPeer, colTarget      = "#555", "#d62728"
	)
	pw, ph := float64(width-left-right), float64(height-top-below)
	target := msOf(latencyTargetP99)
	maxN, lo, hi := 1.0, target, target
	for _, x := range fast {
		maxN = math.Max(maxN, float64(x.N))
		lo, hi = math.Min(lo, msOf(x.Lat.P50)), math.Max(hi, msOf(x.Lat.P99))
	}
	if def != nil {
		maxN = math.Max(maxN, float64(def.N))
		hi = math.Max(hi, msOf(def.Lat.P99))
	}
	for _, p := range peers {
		lo, hi = math.Min(lo, msOf(p.Lat.P99)), math.Max(hi, msOf(p.Lat.P99))
	}
	x1 := math.Max(1, math.Ceil(math.Log2(maxN)))
	// From the power of ten below the lowest value to the one above the highest.
	y0, y1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi*1.2))
	px := func(n int) float64 { return float64(left) + math.Log2(float64(n))/x1*pw }
	py := func(v float64) float64 {
		return float64(top) + ph - (math.Log10(v)-y0)/(y1-y0)*ph
	}

	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	w(`<text x="%d" y="22" font-size="14" font-weight="bold">Latency, send to handler (%s events/s for %s, c = %d): what N costs</text>`+"\n",
		left, commas(int64(r.Config.LatRate)), r.Config.LatDuration, r.Config.LatC)
	for e := y0; e <= y1; e++ {
		v := math.Pow(10, e)
		y := py(v)
		w(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, float64(left)+pw, y)
		label := fnum(v)
		if v >= 1 {
			label = commas(int64(v))
		}
		w(`<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s ms</text>`+"\n", left-6, y, label)
	}
	for e := 0.0; e <= x1; e++ {
		n := int(math.Pow(2, e))
		x := px(n)
		w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, top, x, float64(top)+ph)
		w(`<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x, float64(top)+ph+16, n)
	}
	w(`<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	w(`<text x="%.1f" y="%.1f" text-anchor="middle">N (slots, one worker)</text>`+"\n", float64(left)+pw/2, float64(top)+ph+36)
	type hl struct {
		v           float64
		color, dash string
		label       string
	}
	lines := []hl{{target, colTarget, "2 3", fmt.Sprintf("target p99 %s ms", fnum(target))}}
	for _, p := range peers {
		lines = append(lines, hl{msOf(p.Lat.P99), colPeer, "6 4", fmt.Sprintf("%s p99 %s ms", p.System, ms(p.Lat.P99))})
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].v > lines[j].v }) // top to bottom
	labelY := math.Inf(-1)
	for _, l := range lines {
		y := py(l.v)
		w(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2" stroke-dasharray="%s"/>`+"\n", left, y, float64(left)+pw, y, l.color, l.dash)
		labelY = math.Max(y, labelY+13) // labels of close lines one under the other
		w(`<text x="%.1f" y="%.1f" font-size="11" fill="%s" dominant-baseline="middle">%s</text>`+"\n", float64(left)+pw+6, labelY, l.color, html.EscapeString(l.label))
	}
	series := func(val func(*Result) time.Duration, color, name string) {
		var pts []string
		for _, x := range fast {
			cx, cy := px(x.N), py(msOf(val(x)))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", cx, cy))
			w(`%s`+"\n", marker("circle", cx, cy, color, fmt.Sprintf("%s %s: %s ms", name, x.Config, ms(val(x)))))
		}
		w(`<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.Join(pts, " "), color)
		last := fast[len(fast)-1]
		w(`<text x="%.1f" y="%.1f" font-size="11" fill="%s">%s</text>`+"\n", px(last.N)+8, py(msOf(val(last)))+4, color, name)
	}
	series(func(x *Result) time.Duration { return x.Lat.P50 }, colP50, "p50, lowest ticks")
	series(func(x *Result) time.Duration { return x.Lat.P99 }, colP99, "p99, lowest ticks")
	if def != nil {
		cx, cy := px(def.N), py(msOf(def.Lat.P99))
		w(`%s`+"\n", marker("cross", cx, cy, colDef, fmt.Sprintf("p99 with every default, %s: %s ms", def.Config, ms(def.Lat.P99))))
		w(`<text x="%.1f" y="%.1f" font-size="11" fill="%s" text-anchor="end">p99, every default: %s ms</text>`+"\n", cx-8, cy+16, colDef, ms(def.Lat.P99))
	}
	w("</svg>\n")
	return sb.String()
}
