package bench

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sync/errgroup"

	"github.com/trimtab/trimtab/sim/fakeserver"
	"github.com/trimtab/trimtab/sim/scenario"
)

// StartFleet starts n simulated vLLM servers (sim/fakeserver) on
// 127.0.0.1:0 with sc's engine model, sped up speed times; server i has
// the scenario's capacity i when n equals its server count, else 1, and
// runs the engine the simulator gives it (scenario.Scenario.ServerEngine: in
// a mixed pool its engine class's KV cache and step costs) and declares
// that capacity. The servers share one Responses store (bounded, the
// fakeserver defaults), so a previous_response_id continuation is
// prefilled with its whole conversation whichever server it reaches. The
// servers run in g until ctx ends.
func StartFleet(ctx context.Context, g *errgroup.Group, sc *scenario.Scenario, n int, speed float64) ([]Target, error) {
	if n < 1 || n > 256 {
		return nil, fmt.Errorf("fleet: %d servers, want 1…256", n)
	}
	caps := sc.Capacities()
	store, err := fakeserver.NewResponseStore(fakeserver.DefaultStoredResponses, fakeserver.DefaultStoredBytes)
	if err != nil {
		return nil, err
	}
	var out []Target
	for i := 0; i < n; i++ {
		c := 1.0
		if len(caps) == n {
			c = caps[i]
		}
		cfg := fakeserver.DefaultConfig()
		cfg.Name = fmt.Sprintf("pod-%d", i)
		cfg.TimeScale = speed
		var declared float64
		cfg.Engine, declared = sc.ServerEngine(i, c)
		if sc.Model != "" {
			cfg.Model = sc.Model
		}
		srv, err := fakeserver.New(cfg, fakeserver.Deps{Responses: store})
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		g.Go(func() error { return srv.Serve(ctx, ln) })
		out = append(out, Target{Address: ln.Addr().String(), Name: cfg.Name, Model: cfg.Model, Capacity: declared})
	}
	return out, nil
}
