package chaos

import (
	"bytes"
	"fmt"
	"html"
	"math"
)

// SVG draws the soak's samples as small charts, one per measure, against
// the run's time: the workers' resident memory and goroutines (the most of
// any worker), the database's sessions, and the sizes of partitionq's
// tables, the retry queue and the event tables; faults are ticks on the
// time axis.
func (r SoakReport) SVG() []byte {
	type series struct {
		title, unit string
		v           func(SoakSample) float64
	}
	charts := []series{
		{"worker RSS (most of any worker)", "MiB", func(s SoakSample) float64 { return most(s.RSS) / (1 << 20) }},
		{"worker goroutines (most of any worker)", "", func(s SoakSample) float64 { return most(s.Goroutines) }},
		{"database sessions", "", func(s SoakSample) float64 { return float64(s.Conns) }},
		{"partitionq's tables (but dead letters, audit)", "MiB", func(s SoakSample) float64 { return float64(s.Sizes["partitionq"]) / (1 << 20) }},
		{"the engine's retry queue", "MiB", func(s SoakSample) float64 { return float64(s.Sizes["retry_queue"]) / (1 << 20) }},
		{"the engine's event tables", "MiB", func(s SoakSample) float64 { return float64(s.Sizes["event_tables"]) / (1 << 20) }},
	}
	const w, h, pad, cols = 360.0, 150.0, 40.0, 2
	rows := (len(charts) + cols - 1) / cols
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n",
		cols*(w+pad)+pad, float64(rows)*(h+2*pad)+pad)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	var end float64
	if n := len(r.Samples); n > 0 {
		end = r.Samples[n-1].At.Seconds()
	}
	if end <= 0 {
		end = 1
	}
	for i, c := range charts {
		x0 := pad + float64(i%cols)*(w+pad)
		y0 := pad + float64(i/cols)*(h+2*pad)
		top := 0.0
		for _, s := range r.Samples {
			top = max(top, c.v(s))
		}
		top = niceCeil(top)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", x0, y0-8, html.EscapeString(c.title))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#bbb"/>`+"\n", x0, y0, w, h)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%s %s</text>`+"\n", x0-4, y0+10, trimFloat(top), c.unit)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n", x0-4, y0+h)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", x0+w, y0+h+14, fmtSecs(end))
		prev := 0
		for j, s := range r.Samples { // faults: ticks under the axis
			if s.Faults > prev {
				x := x0 + w*s.At.Seconds()/end
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#d33"/>`+"\n", x, y0+h, x, y0+h+5)
			}
			prev = r.Samples[j].Faults
		}
		var pts bytes.Buffer
		for _, s := range r.Samples {
			y := y0 + h
			if top > 0 {
				y = y0 + h - h*c.v(s)/top
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", x0+w*s.At.Seconds()/end, y)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#2563eb" stroke-width="1.5" points="%s"/>`+"\n", bytes.TrimSpace(pts.Bytes()))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="#d33">red ticks: faults (a worker killed, or every worker session terminated)</text>`+"\n",
		pad, float64(rows)*(h+2*pad)+pad/2)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", v)
}

func fmtSecs(s float64) string {
	if s >= 120 {
		return fmt.Sprintf("%.0f min", s/60)
	}
	return fmt.Sprintf("%.0f s", s)
}
