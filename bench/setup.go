package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/sim"
)

// ParseTargets turns server base URLs ("http://10.0.0.5:8000") into
// targets serving model.
func ParseTargets(urls []string, model string) ([]Target, error) {
	var out []Target
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("target %q: want a base URL like http://10.0.0.5:8000", s)
		}
		out = append(out, Target{Address: u.Host, Model: model})
	}
	return out, nil
}

// Policies resolves policy names — the simulator's built-in policies
// (sim.Policies) — and profile files (each a policy named after its file),
// in that order. A built-in policy that is a profile runs as that profile;
// a baseline that is not one (round-robin, sglang-switch) runs with the
// simulator's own scheduler for it (Policy.Baseline) in a router with
// BaselineProfile's settings.
func Policies(names, profiles []string) ([]Policy, error) {
	var out []Policy
	if len(names) > 0 {
		pols, err := sim.Policies(names)
		if err != nil {
			return nil, err
		}
		for _, p := range pols {
			pol := Policy{Name: p.Name}
			if p.Profile != nil {
				pol.Profile, err = p.Profile()
			} else {
				pol.Profile, err = configs.Parse([]byte(BaselineProfile))
				pol.Baseline = &p
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.Name, err)
			}
			out = append(out, pol)
		}
	}
	for _, path := range profiles {
		f, err := configs.Load(path)
		if err != nil {
			return nil, err
		}
		out = append(out, Policy{Name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), Profile: f})
	}
	return out, nil
}

// BaselineProfile is the router profile of a simulator baseline that is
// not a profile: the default server settings with the control loop off.
// Its scorer is never used (the baseline's scheduler replaces it).
const BaselineProfile = `
scorers:
  - type: queue
    weight: 1
adaptive:
  enabled: false
`

// PolicyNames lists the simulator's built-in policies, every one of which
// bench can run, in report order.
func PolicyNames() []string { return sim.PolicyNames() }

// LoadAverage returns the machine's 1, 5 and 15 minute load averages from
// /proc/loadavg, or "unknown".
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// PrintProgress returns a Deps.Progress that redraws one status line on a
// terminal, or prints a line every ten snapshots elsewhere.
func PrintProgress(w io.Writer, terminal bool) func(Live) {
	n := 0
	return func(l Live) {
		if n++; terminal {
			fmt.Fprintf(w, "\r%s\033[K", l.Line())
		} else if n%10 == 0 {
			fmt.Fprintln(w, l.Line())
		}
	}
}

// waitReady polls the router's /readyz until it reports every one of n
// endpoints fresh (any when n is 0), for at most within.
func waitReady(ctx context.Context, d *Deps, adminURL string, n int, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(adminURL, "/")+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := d.Client.Do(req); err == nil {
			var st struct {
				Fresh int `json:"fresh_endpoints"`
				Total int `json:"endpoints"`
			}
			derr := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&st)
			resp.Body.Close()
			if derr == nil && resp.StatusCode == http.StatusOK && st.Fresh >= max(n, 1) && st.Fresh == st.Total {
				return nil
			}
			last = fmt.Sprintf("%d of %d endpoints fresh", st.Fresh, st.Total)
		} else {
			last = err.Error()
		}
		t := d.Clock.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("router not ready within %v (%s)", within, last)
		case <-t.C():
		}
	}
}
