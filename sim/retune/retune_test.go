package retune

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/control"
)

// window is a small recorded window: 80 requests, one every 50 ms, each
// opening with one of 4 shared 2-block prefixes and a unique third block
// (3 × 512 = 1536 tokens).
func window(t *testing.T) *control.Window {
	t.Helper()
	var b strings.Builder
	for i := range 80 {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 1536, "output_length": 0, "hash_ids": [%d, %d, %d]}`+"\n", 50*i, 2*(i%4), 2*(i%4)+1, 100+i)
	}
	engine, err := os.ReadFile("../engines/a100-40gb-llama-3.1-8b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	r := f.Reloadable()
	return &control.Window{Trace: []byte(b.String()), Requests: 80, Endpoints: 2, Engine: engine, EngineLearned: 2,
		Calm: r.Weights, Adaptive: r.Adaptive, Budget: 3, Seeds: 1}
}

// TestPropose replays a window with a budget of 3 vectors: the weights in
// force are a candidate, at most 3 are evaluated, the scores are the tune
// objective in [0, 1] with the best at the top, and a second replay of the
// same window gives the same proposal (replicas replaying one window
// agree).
func TestPropose(t *testing.T) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	w := window(t)
	p, err := r.Propose(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Candidates); n < 2 || n > w.Budget {
		t.Fatalf("%d candidates, want 2…%d", n, w.Budget)
	}
	cur := p.Candidates[p.Current]
	if cur.Name != CandidateCurrent || !reflect.DeepEqual(cur.Weights, w.Calm) {
		t.Errorf("current candidate %+v, want the calm weights %v", cur, w.Calm)
	}
	for i, c := range p.Candidates {
		if !(c.Score >= 0 && c.Score <= 1) || c.Score > p.Candidates[p.Best].Score || !(c.TTFTP99 > 0) || !(c.TokPerSec > 0) {
			t.Errorf("candidate %d %+v: want a score in [0, 1] no higher than the best's, and measured TTFT and tok/s", i, c)
		}
	}
	again, err := r.Propose(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, again) {
		t.Errorf("two replays of one window differ:\n%+v\n%+v", p, again)
	}
	if w.Calm[0] != f.Reloadable().Weights[0] || *f.Scorers[0].Weight != w.Calm[0] {
		t.Error("Propose modified the window or the profile")
	}
}

func TestProposeRefusesBadInput(t *testing.T) {
	f, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	for name, tt := range map[string]struct {
		set  func(*control.Window)
		want string
	}{
		"calm length":   {func(w *control.Window) { w.Calm = w.Calm[:1] }, "calm weights"},
		"empty window":  {func(w *control.Window) { w.Trace = nil }, "window"},
		"no endpoints":  {func(w *control.Window) { w.Endpoints = 0 }, "servers"},
		"bad engine":    {func(w *control.Window) { w.Engine = []byte("warp_drive: 1\n") }, "calibrated engine"},
		"engine values": {func(w *control.Window) { w.Engine = []byte("block_size: -1\n") }, "calibrated engine"},
	} {
		w := window(t)
		tt.set(w)
		if _, err := r.Propose(context.Background(), w); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tt.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Propose(ctx, window(t)); err == nil {
		t.Error("a cancelled replay succeeded")
	}
	if _, err := New(configs.Default()); err == nil {
		t.Error("New accepted a profile without scorers")
	}
}
