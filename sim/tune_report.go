package sim

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/configs"
)

// WriteMarkdown writes the search's report: the suite's best vector,
// every vector ranked, and each scenario's own best.
func (r *TuneResult) WriteMarkdown(w io.Writer, cmdline string) error {
	pr := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	vec := func(ev *Evaluated) string {
		parts := make([]string, len(ev.Weights))
		for i, v := range ev.Weights {
			parts[i] = fmt.Sprintf("%s %s", r.Scorers[i], fmtWeight(v))
		}
		return strings.Join(parts, " : ")
	}
	best := r.Vectors[r.Best]
	pr("# trimtab sim tune\n\n`%s`\n\n", cmdline)
	pr("%d weight vectors over %d cells (scenario × level). Ratio = the per-cell best TTFT p99 ÷ this vector's, and this vector's tok/s ÷ the per-cell best; score = (worst + mean) / 2.\n\n", len(r.Vectors), len(r.Cells))
	pr("**Best for the suite:** %s (score %.3f, worst %.3f, mean %.3f)\n\n", vec(best), best.Score, best.Worst, best.Mean)
	if len(r.Skipped) > 0 {
		pr("Built-in policies the profile's scorers cannot express (not searched): %s.\n\n", strings.Join(r.Skipped, ", "))
	}
	order := make([]int, len(r.Vectors))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return -cmpFloat(r.Vectors[a].Score, r.Vectors[b].Score) })
	pr("## Every vector, best first\n\n| rank | name | weights | score | worst | mean |\n|---:|---|---|---:|---:|---:|\n")
	for k, i := range order {
		ev := r.Vectors[i]
		pr("| %d | %s | %s | %.3f | %.3f | %.3f |\n", k+1, ev.Name, vec(ev), ev.Score, ev.Worst, ev.Mean)
	}
	pr("\n## Each scenario's own best\n\n| scenario | best vector | its score there | the suite's best there |\n|---|---|---:|---:|\n")
	var names []string
	for n := range r.ScenarioBest {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		i := r.ScenarioBest[n]
		pr("| %s | %s (%s) | %.3f | %.3f |\n", n, vec(r.Vectors[i]), r.Vectors[i].Name, r.ScenarioScore(i, n), r.ScenarioScore(r.Best, n))
	}
	_, err := fmt.Fprintln(w)
	return err
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fmtWeight prints a weight with three significant digits.
func fmtWeight(v float64) string {
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// WriteProfile writes profile f with the best vector's weights, as YAML
// in the configs schema, headed by comment. The loop is off unless the
// search ran with it on; then the adaptive section is written as
// "enabled: true" alone (the other keys at their defaults). The profile's
// scheduler.guard, under which every vector ran, is written with it.
func (r *TuneResult) WriteProfile(w io.Writer, f *configs.File, comment string) error {
	type scorer struct {
		Type   string         `yaml:"type"`
		Name   string         `yaml:"name,omitempty"`
		Weight float64        `yaml:"weight"`
		Params map[string]any `yaml:"params,omitempty"`
	}
	doc := struct {
		Scheduler map[string]any `yaml:"scheduler"`
		Picker    map[string]any `yaml:"picker"`
		Filters   []string       `yaml:"filters"`
		Scorers   []scorer       `yaml:"scorers"`
		Adaptive  map[string]any `yaml:"adaptive"`
	}{
		Scheduler: map[string]any{"max_fallbacks": f.Scheduler.MaxFallbacks},
		Picker:    map[string]any{"type": f.Picker.Type},
		Filters:   f.Filters,
		Adaptive:  map[string]any{"enabled": r.Loop},
	}
	if g := f.Scheduler.Guard; g.Factor > 0 {
		doc.Scheduler["guard"] = map[string]any{"factor": g.Factor, "slack": g.Slack, "crowd_factor": g.CrowdFactor, "crowd_slack": g.CrowdSlack,
			"unit": g.Unit, "prefill_tokens_per_second": g.PrefillTokensPerSecond, "wait_factor": g.WaitFactor, "wait_slack": g.WaitSlack, "join_factor": g.JoinFactor}
	}
	if f.Picker.Type == "" {
		doc.Picker["type"] = "max-score"
	}
	if f.Picker.Type == "weighted-random" {
		doc.Picker["temperature"] = f.Picker.Temperature
	}
	for i, s := range f.Scorers {
		wv, _ := fmtWeightFloat(r.Vectors[r.Best].Weights[i])
		doc.Scorers = append(doc.Scorers, scorer{Type: s.Type, Name: nameIfSet(s), Weight: wv, Params: s.Params})
	}
	for _, line := range strings.Split(strings.TrimRight(comment, "\n"), "\n") {
		if _, err := fmt.Fprintf(w, "# %s\n", line); err != nil {
			return err
		}
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

func fmtWeightFloat(v float64) (float64, error) {
	var out float64
	_, err := fmt.Sscan(fmtWeight(v), &out)
	return out, err
}

func scorerName(s configs.ScorerConfig) string {
	if s.Name != "" {
		return s.Name
	}
	return s.Type
}

func nameIfSet(s configs.ScorerConfig) string {
	if s.Name == s.Type {
		return ""
	}
	return s.Name
}
