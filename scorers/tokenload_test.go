package scorers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/internal/scorertest"
	"github.com/trimtab/trimtab/scorers/prefix"
)

// tokenRig is a real scheduler over pods a:1, b:1, c:1 with a prefix scorer
// learning at the pick (4-token blocks of 4 bytes: 16-byte blocks; weight
// 0, the index alone), the token-load scorer (weight 1) and, when aff is
// set, the prefix-affinity filter.
type tokenRig struct {
	s   *scheduler.Scheduler
	reg *prometheus.Registry
}

func newTokenRig(t *testing.T, tl TokenLoadConfig, aff *PrefixAffinityConfig) *tokenRig {
	t.Helper()
	pcfg := prefix.DefaultConfig()
	pcfg.BlockSize, pcfg.Learn = 4, prefix.LearnPick
	p, err := prefix.New("prefix", pcfg, prefix.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	load, err := NewTokenLoad("token-load", tl, Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	var filters []scheduler.Filter
	if aff != nil {
		f, err := NewPrefixAffinity(*aff, reg)
		if err != nil {
			t.Fatal(err)
		}
		filters = append(filters, f)
	}
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "prefix", Type: TypePrefix, Scorer: p, Weight: 0},
		{Name: "token-load", Type: TypeTokenLoad, Scorer: load, Weight: 1},
	}, filters, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(scorertest.Eps("a:1", "b:1", "c:1"))
	return &tokenRig{s: s, reg: reg}
}

// pick picks req (restricted to subset when given) and returns the
// decision, still open.
func (r *tokenRig) pick(t *testing.T, prompt string, subset ...string) *scheduler.Decision {
	t.Helper()
	d, err := r.s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(prompt), Subset: subset})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// tokenScores returns the token-load scores by address.
func tokenScores(d *scheduler.Decision) map[string]float64 {
	out := map[string]float64{}
	for i, e := range d.Candidates() {
		out[e.Address] = d.Score(1, i)
	}
	return out
}

func (r *tokenRig) pending(addr string) int64 {
	for _, e := range r.s.Pool().Pointers() {
		if e.Address == addr {
			return e.PendingTokens()
		}
	}
	return -1
}

// Prompts: P is 64 bytes (16 tokens, 4 blocks); R shares P's first 48
// bytes (3 blocks) and differs in the last 16; Q shares nothing.
var (
	promptP = strings.Repeat("p", 64)
	promptR = strings.Repeat("p", 48) + strings.Repeat("r", 16)
	promptQ = strings.Repeat("q", 64)
)

// TestTokenLoadScores: hand-computed loads and scores.
func TestTokenLoadScores(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    int64
		// after P is held on a:1 (16 uncached tokens pending there),
		// R's scores; then after P's first byte, R's scores again.
		held, released map[string]float64
	}{
		// Held: a = 16 pending + (16 − 12 cached) = 20; b, c = 0 + 16.
		// Relative: (20 − l)/(20 − 16): a 0, b and c 1.
		// Released: a = 0 + 4 = 4, b, c 16: a (16−4)/12 = 1, b, c 0.
		{"relative", 0, map[string]float64{"a:1": 0, "b:1": 1, "c:1": 1}, map[string]float64{"a:1": 1, "b:1": 0, "c:1": 0}},
		// llm-d's scale, Q = 40: held a 1 − 20/40 = 0.5, b, c 1 − 16/40 =
		// 0.6; released a 1 − 4/40 = 0.9, b, c 0.6.
		{"queue threshold 40", 40, map[string]float64{"a:1": 0.5, "b:1": 0.6, "c:1": 0.6}, map[string]float64{"a:1": 0.9, "b:1": 0.6, "c:1": 0.6}},
		// Q = 10: every load is at or above Q: held a 0, b, c 0;
		// released a 1 − 4/10 = 0.6, b, c 0.
		{"queue threshold 10", 10, map[string]float64{"a:1": 0, "b:1": 0, "c:1": 0}, map[string]float64{"a:1": 0.6, "b:1": 0, "c:1": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultTokenLoadConfig()
			cfg.QueueThresholdTokens = tc.q
			for _, release := range []bool{false, true} {
				r := newTokenRig(t, cfg, nil)
				p := r.pick(t, promptP, "a:1")
				if got := r.pending("a:1"); got != 16 {
					t.Fatalf("P pending on a:1: %d tokens, want 16 (nothing cached)", got)
				}
				label, want := "held", tc.held
				if release {
					p.FirstByte()
					if got := r.pending("a:1"); got != 0 {
						t.Fatalf("after P's first byte a:1 has %d pending tokens, want 0", got)
					}
					label, want = "released", tc.released
				}
				d := r.pick(t, promptR)
				checkTokenScores(t, label, tokenScores(d), want)
				d.Done(scheduler.Outcome{})
				p.Done(scheduler.Outcome{})
			}
		})
	}
}

func checkTokenScores(t *testing.T, label string, got, want map[string]float64) {
	t.Helper()
	for a, w := range want {
		if g := got[a]; g < w-1e-9 || g > w+1e-9 {
			t.Errorf("%s: %s scored %v, want %v", label, a, g, w)
		}
	}
}

// TestPendingTokensMoveWithRetry: the uncached tokens follow the request
// to its fallback and leave at the first byte; each endpoint is charged
// what it does not hold. P on a:1 (picked, released); then R restricted
// to a:1 and b:1 goes to a:1 (4 uncached against b:1's 16), 4 tokens
// pending there; a retry moves it to b:1, which holds nothing: 16.
func TestPendingTokensMoveWithRetry(t *testing.T) {
	r := newTokenRig(t, DefaultTokenLoadConfig(), nil)
	p := r.pick(t, promptP, "a:1")
	p.FirstByte()
	p.Done(scheduler.Outcome{})
	d := r.pick(t, promptR, "a:1", "b:1")
	if d.Endpoint.Address != "a:1" || r.pending("a:1") != 4 {
		t.Fatalf("R on %s with a:1 pending %d, want a:1 with 4", d.Endpoint.Address, r.pending("a:1"))
	}
	if !d.Advance() {
		t.Fatal("no fallback")
	}
	if r.pending("a:1") != 0 || r.pending("b:1") != 16 {
		t.Errorf("after the retry a:1 %d, b:1 %d pending; want 0 and 16", r.pending("a:1"), r.pending("b:1"))
	}
	d.Done(scheduler.Outcome{Kind: scheduler.OutcomeError})
	for _, a := range []string{"a:1", "b:1", "c:1"} {
		if got := r.pending(a); got != 0 {
			t.Errorf("after Done %s has %d pending tokens", a, got)
		}
	}
}

// TestTokenLoadWithoutIndex: without a prefix scorer the load is pending
// prompt bytes ÷ 4 + the prompt ÷ 4, counted under no_prefix_index.
// a:1 holds a 64-byte request: a = 64/4 + 64/4 = 32, b = 16: relative a
// 0, b 1.
func TestTokenLoadWithoutIndex(t *testing.T) {
	reg := prometheus.NewRegistry()
	load, err := NewTokenLoad("token-load", DefaultTokenLoadConfig(), Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{{Name: "token-load", Scorer: load, Weight: 1}}, nil, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEndpoints(scorertest.Eps("a:1", "b:1"))
	held, _ := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(promptQ), Subset: []string{"a:1"}})
	d, _ := s.Pick(context.Background(), &scheduler.Request{Model: "m", Prompt: []byte(promptP)})
	checkTokenScores(t, "no index", map[string]float64{d.Candidates()[0].Address: d.Score(0, 0), d.Candidates()[1].Address: d.Score(0, 1)}, map[string]float64{"a:1": 0, "b:1": 1})
	if d.Endpoint.Address != "b:1" {
		t.Errorf("chose %s, want b:1", d.Endpoint.Address)
	}
	d.Done(scheduler.Outcome{})
	held.Done(scheduler.Outcome{})
	if got := testutil.ToFloat64(load.noIdx.(prometheus.Counter)); got != 3 {
		t.Errorf("no_prefix_index count %v, want 3 (one per scored candidate)", got)
	}
}

// TestPrefixAffinityFilter: hand-computed decisions. Every case first
// holds P and Q on a:1 (a:1: 16 + 16 = 32 pending uncached tokens, and
// P's 4 blocks indexed there), then asks for a request; candidates are
// what the filter kept.
func TestPrefixAffinityFilter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     PrefixAffinityConfig
		prompt  string
		kept    []string // candidates after the filter
		outcome string
	}{
		// P on a:1: ratio 4/4 = 1 ≥ 0.8, sticky {a:1}; gate 32 − 0 = 32 ≤
		// 286,720: narrowed to a:1.
		{"sticky", DefaultPrefixAffinityConfig(), promptP, []string{"a:1"}, affinitySticky},
		// Penalty 20: 32 − 0 > 20, the gate keeps all (token-load then
		// sends it to b:1 or c:1: 16 against a:1's 32).
		{"gate breaks", PrefixAffinityConfig{Threshold: 0.8, MaxTokensInFlightPenalty: 20, BytesPerToken: 4}, promptP, []string{"a:1", "b:1", "c:1"}, affinityLoadOverride},
		// Penalty 32: 32 − 0 = 32 is not > 32: sticky.
		{"gate at its edge", PrefixAffinityConfig{Threshold: 0.8, MaxTokensInFlightPenalty: 32, BytesPerToken: 4}, promptP, []string{"a:1"}, affinitySticky},
		// Penalty 0: always stick.
		{"gate off", PrefixAffinityConfig{Threshold: 0.8, BytesPerToken: 4}, promptP, []string{"a:1"}, affinitySticky},
		// R on a:1: 3 of 4 blocks = 0.75 < 0.8: no sticky candidate.
		{"below threshold", DefaultPrefixAffinityConfig(), promptR, []string{"a:1", "b:1", "c:1"}, affinityNoMatch},
		// τ 0.75: R's 0.75 ≥ 0.75, sticky.
		{"at threshold", PrefixAffinityConfig{Threshold: 0.75, MaxTokensInFlightPenalty: 286720, BytesPerToken: 4}, promptR, []string{"a:1"}, affinitySticky},
		// τ 0: the filter is off.
		{"threshold 0", PrefixAffinityConfig{BytesPerToken: 4}, promptP, []string{"a:1", "b:1", "c:1"}, affinityNotApplicable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			r := newTokenRig(t, DefaultTokenLoadConfig(), &cfg)
			h1 := r.pick(t, promptP, "a:1")
			h2 := r.pick(t, promptQ, "a:1")
			if got := r.pending("a:1"); got != 32 {
				t.Fatalf("a:1 pending %d, want 32", got)
			}
			d := r.pick(t, tc.prompt)
			var kept []string
			for _, e := range d.Candidates() {
				kept = append(kept, e.Address)
			}
			if fmt.Sprint(kept) != fmt.Sprint(tc.kept) {
				t.Errorf("kept %v, want %v", kept, tc.kept)
			}
			if tc.outcome == affinityLoadOverride && d.Endpoint.Address == "a:1" {
				t.Errorf("after the gate broke the request went to a:1 (token load 32 against 16)")
			}
			// The two held picks ran with one candidate: not_applicable.
			want := fmt.Sprintf("trimtab_prefix_affinity_decisions_total{outcome=%q} 1\n", tc.outcome)
			if tc.outcome == affinityNotApplicable {
				want = fmt.Sprintf("trimtab_prefix_affinity_decisions_total{outcome=%q} 3\n", tc.outcome)
			}
			if err := testutil.CollectAndCompare(r.reg, strings.NewReader(
				"# HELP trimtab_prefix_affinity_decisions_total Decisions of the prefix-affinity filter, by outcome: sticky (narrowed to the candidates holding the prompt), load_override (the load gate kept all), no_match, no_index, not_applicable.\n# TYPE trimtab_prefix_affinity_decisions_total counter\n"+
					allOutcomes(tc.outcome, want)), "trimtab_prefix_affinity_decisions_total"); err != nil {
				t.Error(err)
			}
			for _, x := range []*scheduler.Decision{d, h1, h2} {
				x.Done(scheduler.Outcome{})
			}
		})
	}
}

// allOutcomes renders every outcome's line: 2 not_applicable (the held
// picks) plus the line for the tested outcome.
func allOutcomes(outcome, line string) string {
	var b strings.Builder
	for _, o := range []string{affinityLoadOverride, affinityNoIndex, affinityNoMatch, affinityNotApplicable, affinitySticky} {
		switch {
		case o == outcome:
			b.WriteString(line)
		case o == affinityNotApplicable:
			fmt.Fprintf(&b, "trimtab_prefix_affinity_decisions_total{outcome=%q} 2\n", o)
		default:
			fmt.Fprintf(&b, "trimtab_prefix_affinity_decisions_total{outcome=%q} 0\n", o)
		}
	}
	return b.String()
}

func TestPrefixAffinityConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  PrefixAffinityConfig
		want string
	}{
		{PrefixAffinityConfig{Threshold: 1.2, BytesPerToken: 4}, "prefix_affinity.threshold"},
		{PrefixAffinityConfig{Threshold: 0.8, MaxTokensInFlightPenalty: -1, BytesPerToken: 4}, "prefix_affinity.max_tokens_in_flight_penalty"},
		{PrefixAffinityConfig{Threshold: 0.8}, "prefix_affinity.bytes_per_token"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if err := (TokenLoadConfig{QueueThresholdTokens: -1, BytesPerToken: 4}).Validate(); err == nil || !strings.Contains(err.Error(), "token-load.queue_threshold_tokens") {
		t.Errorf("negative threshold: %v", err)
	}
}

// TestTokenLoadPickAllocatesNothing: the llm-d composition (prefix index,
// prefix-affinity filter, token-load) picks, releases at the first byte
// and finishes without allocating.
func TestTokenLoadPickAllocatesNothing(t *testing.T) {
	if scorertest.RaceEnabled {
		t.Skip("allocation counts need a build without -race (sync.Pool drops items at random under it)")
	}
	pickFirstByteAllocatesNothing(t, tokenLoadScheduler(t, scorertest.BenchEndpoints(64, 1)), "the prefix-affinity filter and token-load")
}

func tokenLoadScheduler(tb testing.TB, pool []scheduler.Endpoint) *scheduler.Scheduler {
	tb.Helper()
	pcfg := prefix.DefaultConfig()
	pcfg.Learn = prefix.LearnPick
	p, err := prefix.New("prefix", pcfg, prefix.Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	load, err := NewTokenLoad("token-load", DefaultTokenLoadConfig(), Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	f, err := NewPrefixAffinity(DefaultPrefixAffinityConfig(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := scheduler.New(scheduler.DefaultConfig(), []scheduler.ScorerEntry{
		{Name: "prefix", Scorer: p, Weight: 0},
		{Name: "token-load", Scorer: load, Weight: 1},
	}, []scheduler.Filter{scheduler.ModelFilter{}, scheduler.HealthyFilter{}, f}, scheduler.MaxScore{}, scheduler.Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	s.SetEndpoints(pool)
	return s
}

// BenchmarkPickTokenLoad is BenchmarkPick for the llm-d composition:
// the prefix lookup before the filters, the prefix-affinity filter, the
// token-load scorer, tokens released at the first byte.
func BenchmarkPickTokenLoad(b *testing.B) {
	for _, n := range scorertest.BenchSizes.Endpoints {
		tok := 8 << 10
		b.Run(fmt.Sprintf("endpoints=%d/prompt=%dk", n, tok>>10), func(b *testing.B) {
			s := tokenLoadScheduler(b, scorertest.BenchEndpoints(n, 1))
			scorertest.BenchPicks(b, s, scorertest.BenchWorkload(tok, 16, 8, 1024, 1))
		})
	}
}
