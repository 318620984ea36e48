package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/control"
)

// TestRetuneOnRecordedTraffic: a real serve in front of two fake servers
// records its traffic; a run of the wired slow loop (advisory, a budget of
// 3 vectors) replays the window on the calibrated engine, and
// /debug/retune — behind the admin token — shows the window, the engine,
// the candidates with their scores, and the decision with its reason. The
// run takes the window: the recording starts afresh. Advisory mode leaves
// the weights alone.
func TestRetuneOnRecordedTraffic(t *testing.T) {
	const token = "retune-test-token-0123456789"
	addrs := startFakeFleet(t, 2)
	ts := startServiceWith(t, addrs, true, fmt.Sprintf(`server:
  admin:
    token: %s
    record:
      enabled: true
retune:
  min_requests: 6
  budget: 3
`, token))
	defer func() {
		if err := ts.stop(); err != nil {
			t.Error(err)
		}
	}()
	for i := range 12 {
		prompt := strings.Repeat(fmt.Sprintf("family %d shares this prefix. ", i%3), 200) + fmt.Sprintf("question %d?", i)
		body, _ := json.Marshal(map[string]any{"model": "llama-3.1-8b-instruct", "max_tokens": 4, "prompt": prompt})
		if resp, text := post(t, ts.proxyURL+"/v1/completions", string(body)); resp.StatusCode != 200 {
			t.Fatalf("completion: %d %s", resp.StatusCode, text)
		}
	}
	get := func(path string, auth bool) (int, []byte) {
		req, _ := http.NewRequest("GET", ts.adminURL+path, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := get(control.PathRetune, false); code != http.StatusUnauthorized {
		t.Errorf("%s without the token: %d, want 401", control.PathRetune, code)
	}
	rep := ts.svc.retune.Step(context.Background(), time.Now())
	if rep.Decision.Action == control.ActionSkip {
		t.Fatalf("the run skipped: %s", rep.Decision.Reason)
	}

	code, body := get(control.PathRetune, true)
	if code != 200 {
		t.Fatalf("%s: %d %s", control.PathRetune, code, body)
	}
	var v struct {
		Config struct{ Mode string }
		Last   struct {
			Window struct{ Requests, Endpoints int }
			Engine struct {
				File string
			}
			Scorers    []string
			Calm       []float64
			Candidates []struct {
				Name    string
				Weights []float64
				Score   float64
			}
			Current, Best int
			Decision      struct{ Action, Reason string }
		}
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	l := v.Last
	if v.Config.Mode != control.RetuneAdvisory || l.Window.Requests != 12 || l.Window.Endpoints != 2 ||
		!strings.Contains(l.Engine.File, "step_per_prefill_token:") || !slices.Equal(l.Scorers, []string{"prefix", "queue", "kvcache", "inflight"}) {
		t.Errorf("/debug/retune inputs:\n%s", body)
	}
	if n := len(l.Candidates); n < 2 || n > 3 || l.Candidates[l.Current].Name != "current" || !slices.Equal(l.Candidates[l.Current].Weights, l.Calm) ||
		!slices.Equal(l.Calm, []float64{16, 2, 2, 1}) {
		t.Errorf("/debug/retune candidates: want 2…3 with the calm weights 16, 2, 2, 1 as current:\n%s", body)
	}
	if a := l.Decision.Action; (a != control.ActionKeep && a != control.ActionPropose) || !strings.Contains(l.Decision.Reason, "min_improvement") {
		t.Errorf("/debug/retune decision %+v, want keep or propose with its reason", l.Decision)
	}
	if code, trace := get("/debug/trace", true); code != 200 || len(trace) != 0 {
		t.Errorf("/debug/trace after the run: %d, %d bytes; want the new, empty window", code, len(trace))
	}
	if base, _, _ := ts.svc.loop.Calm(); !slices.Equal(base, []float64{16, 2, 2, 1}) || !slices.Equal(ts.svc.loop.BaseWeights(), base) {
		t.Errorf("advisory changed the calm weights to %v (in force %v)", base, ts.svc.loop.BaseWeights())
	}
	if _, metrics := get("/metrics", false); !strings.Contains(string(metrics), `trimtab_retune_runs_total{action="`+l.Decision.Action+`"} 1`) {
		t.Errorf("/metrics does not count the run:\n%s", metrics)
	}
}
