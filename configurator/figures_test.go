package configurator

import (
	"flag"
	"fmt"
	"image/color"
	"path/filepath"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/trimtab/trimtab/detector"
	"github.com/trimtab/trimtab/scheduler"
)

var figures = flag.Bool("figures", false, "write the figures of docs/adaptive.md to docs/img")

// TestFigures draws the figures of docs/adaptive.md from the real code:
//
//	go test ./configurator -run TestFigures -figures
func TestFigures(t *testing.T) {
	if !*figures {
		t.Skip("run with -figures to write docs/img/adaptive-*.png")
	}
	dir := filepath.Join("..", "docs", "img")
	for name, draw := range map[string]func() (*plot.Plot, error){
		"adaptive-sigmoid.png":    sigmoidFigure,
		"adaptive-hysteresis.png": hysteresisFigure,
		"adaptive-step.png":       stepFigure,
	} {
		p, err := draw()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

func grid(p *plot.Plot) { p.Add(plotter.NewGrid()) }

// vline is a grey dashed vertical marker at x from y0 to y1.
func vline(p *plot.Plot, x, y0, y1 float64) error {
	l, err := plotter.NewLine(plotter.XYs{{X: x, Y: y0}, {X: x, Y: y1}})
	if err != nil {
		return err
	}
	l.Color = color.Gray{Y: 140}
	l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(l)
	return nil
}

// sigmoidFigure: σ(r) for several k and ν around the default s0.
func sigmoidFigure() (*plot.Plot, error) {
	d := DefaultConfig()
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Generalised logistic σ(r) = (1 + e^(−k(r − s0)))^(−1/ν), s0 = %.2f", d.S0)
	p.X.Label.Text = "signal r"
	p.Y.Label.Text = "σ(r)"
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	grid(p)
	var lines []any
	for _, c := range []struct{ k, nu float64 }{{10, 1}, {25, 1}, {50, 1}, {25, 0.5}, {25, 2}} {
		xy := make(plotter.XYs, 201)
		for i := range xy {
			r := float64(i) / 200
			xy[i] = plotter.XY{X: r, Y: Sigmoid(r, c.k, d.S0, c.nu)}
		}
		label := fmt.Sprintf("k = %g, ν = %g", c.k, c.nu)
		if c.k == d.K && c.nu == d.Nu {
			label += " (default)"
		}
		lines = append(lines, label, xy)
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return nil, err
	}
	// Bottom right: the curves rise around s0 = 0.15 and are flat near 1
	// beyond 0.5, so that corner is empty.
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(10), vg.Points(20)
	return p, nil
}

// hysteresisFigure: D against r for a slow ramp 0 → 1 → 0 through the real
// configurator with the default config.
func hysteresisFigure() (*plot.Plot, error) {
	cfg := DefaultConfig()
	cfg.Enabled = true
	c, err := New(cfg, figureProfile(), nil)
	if err != nil {
		return nil, err
	}
	const n = 4000 // ticks per ramp: 200 s each way
	now := time.Time{}
	for i := 0; i < 20; i++ { // settle from the profile's D to calm first
		c.Step(now, Input{})
		now = now.Add(50 * time.Millisecond)
	}
	var up, down plotter.XYs
	for i := 0; i <= 2*n; i++ {
		r := float64(i) / n
		if i > n {
			r = float64(2*n-i) / n
		}
		w := c.Step(now, Input{Value: r})
		now = now.Add(50 * time.Millisecond)
		pt := plotter.XY{X: r, Y: c.Budget(w)}
		if i <= n {
			up = append(up, pt)
		} else {
			down = append(down, pt)
		}
	}
	curve := make(plotter.XYs, 201)
	for i := range curve {
		r := float64(i) / 200
		curve[i] = plotter.XY{X: r, Y: c.Target(ModeRebalance, r, 0)}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Hysteresis: D against r (θ_on %.2f, θ_off %.2f, D %.1f…%.1f)", cfg.ThetaOn, cfg.ThetaOff, c.CalmBudget(), cfg.DMax)
	p.X.Label.Text = "signal r (slow ramp 0 → 1 → 0)"
	p.Y.Label.Text = "distribution budget D"
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	grid(p)
	if err := vline(p, cfg.ThetaOff, 0, 1); err != nil {
		return nil, err
	}
	if err := vline(p, cfg.ThetaOn, 0, 1); err != nil {
		return nil, err
	}
	rb, err := plotter.NewLine(curve)
	if err != nil {
		return nil, err
	}
	rb.Color = color.Gray{Y: 190}
	rb.Width = vg.Points(6)
	p.Add(rb)
	p.Legend.Add("rebalance target D(r)", rb)
	if err := plotutil.AddLines(p, "r rising (calm until θ_on)", up, "r falling (rebalance until θ_off)", down); err != nil {
		return nil, err
	}
	// Bottom right: D is flat at D_max there, well above the legend.
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(10), vg.Points(20)
	return p, nil
}

// stepFigure: the detector and configurator (defaults) on 16 pods with 8
// requests each; from 2 s to 8 s one pod also queues 80 requests.
func stepFigure() (*plot.Plot, error) {
	cfg := DefaultConfig()
	cfg.Enabled = true
	c, err := New(cfg, figureProfile(), nil)
	if err != nil {
		return nil, err
	}
	det, err := detector.New(detector.DefaultConfig())
	if err != nil {
		return nil, err
	}
	var raw, smooth, budget plotter.XYs
	now := time.Time{}
	for i := 0; i < 20; i++ { // settle from the profile's D to calm first
		c.Step(now, Input{})
		now = now.Add(50 * time.Millisecond)
	}
	for i := 0; i <= 240; i++ { // 12 s
		ts := float64(i) * 0.05
		eps := make([]*scheduler.Endpoint, 16)
		for j := range eps {
			eps[j] = &scheduler.Endpoint{Running: float64(7 + (i+j)%3), KVUtil: 0.3 + 0.01*float64((i*j)%5)}
		}
		if ts >= 2 && ts < 8 {
			eps[0].Waiting = 80
			eps[0].KVUtil = 0.95
		}
		s := det.Step(now, eps)
		w := c.Step(now, Input{Value: s.Value, Pressure: s.Pressure})
		now = now.Add(50 * time.Millisecond)
		raw = append(raw, plotter.XY{X: ts, Y: s.Raw})
		smooth = append(smooth, plotter.XY{X: ts, Y: s.Value})
		budget = append(budget, plotter.XY{X: ts, Y: c.Budget(w)})
	}
	p := plot.New()
	p.Title.Text = "Step response: one pod of 16 queues 80 requests from 2 s to 8 s (defaults)"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "signal, budget"
	p.Y.Min, p.Y.Max = 0, 1
	grid(p)
	if err := plotutil.AddLines(p, "raw normalised CV", raw, "signal r (EWMA α 0.2)", smooth, "distribution budget D", budget); err != nil {
		return nil, err
	}
	for _, th := range []float64{cfg.ThetaOn, cfg.ThetaOff} {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: th}, {X: 12, Y: th}})
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 140}
		l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(l)
	}
	p.Legend.Top = true
	return p, nil
}

// figureProfile is the field's default 3 : 2 : 2 (prefix : queue : kv).
func figureProfile() []scheduler.ScorerEntry {
	return []scheduler.ScorerEntry{
		{Name: "prefix", Scorer: catScorer(scheduler.CategoryAffinity), Weight: 3},
		{Name: "queue", Scorer: catScorer(scheduler.CategoryDistribution), Weight: 2},
		{Name: "kv", Scorer: catScorer(scheduler.CategoryDistribution), Weight: 2},
	}
}
