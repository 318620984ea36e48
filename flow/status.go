package flow

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// PathFlow is where the admin server serves Handler (and OffHandler with
// flow control off).
const PathFlow = "/debug/flow"

// Status is what /debug/flow shows: the queue and, per band, the numbers
// the trimtab_flow_* metrics carry, read from the same metric vectors, so
// the status page and a scrape taken at the same moment agree.
type Status struct {
	// Enabled is false on a router with flow control off (OffHandler).
	Enabled bool `json:"enabled"`
	// Queued is how many requests wait in the router; MaxQueue bounds it.
	Queued   int `json:"queued"`
	MaxQueue int `json:"max_queue"`
	// Bands are the configured bands, highest priority first.
	Bands []BandStatus `json:"bands"`
}

// BandStatus is one band's share of Status. Counters are totals since
// the router started; a reader takes rates from two readings.
type BandStatus struct {
	Name string `json:"name"`
	// Queued is the band's waiting requests
	// (trimtab_flow_queue_depth_requests summed over tenants).
	Queued int64 `json:"queued"`
	// Dispatched counts the band's requests handed to the scheduler
	// (trimtab_flow_dispatches_total); WaitCount and WaitSeconds are the
	// count and sum of their waits in the router (trimtab_flow_wait_seconds).
	Dispatched  uint64  `json:"dispatched"`
	WaitCount   uint64  `json:"wait_count"`
	WaitSeconds float64 `json:"wait_seconds_sum"`
	// Drops counts the band's refused or lost requests by reason
	// (trimtab_flow_drops_total); absent reasons are 0.
	Drops map[string]uint64 `json:"drops"`
	// Tenants are the band's tenants with a metric label of their own
	// (at most metric_tenants, then "other"), by name.
	Tenants []TenantStatus `json:"tenants"`
}

// TenantStatus is one tenant's share of a band.
type TenantStatus struct {
	Name       string `json:"name"`
	Queued     int64  `json:"queued"`
	Dispatched uint64 `json:"dispatched"`
	Dropped    uint64 `json:"dropped"`
}

// Status returns the controller's Status. It reads the metric vectors,
// so it costs a collection of them: meant for a page polled every second,
// not for the request path.
func (c *Controller) Status() Status {
	st := Status{Enabled: true, Queued: c.Len(), MaxQueue: c.cfg.MaxQueue}
	idx := map[string]int{}
	for i, b := range c.cfg.Bands {
		idx[b.Name] = i
		st.Bands = append(st.Bands, BandStatus{Name: b.Name, Drops: map[string]uint64{}})
	}
	tenant := func(b *BandStatus, name string) *TenantStatus {
		for i := range b.Tenants {
			if b.Tenants[i].Name == name {
				return &b.Tenants[i]
			}
		}
		b.Tenants = append(b.Tenants, TenantStatus{Name: name})
		return &b.Tenants[len(b.Tenants)-1]
	}
	each(c.m.depth, func(l map[string]string, m *dto.Metric) {
		if i, ok := idx[l["band"]]; ok {
			v := int64(m.GetGauge().GetValue())
			st.Bands[i].Queued += v
			tenant(&st.Bands[i], l["tenant"]).Queued += v
		}
	})
	each(c.m.dispatchN, func(l map[string]string, m *dto.Metric) {
		if i, ok := idx[l["band"]]; ok {
			v := uint64(m.GetCounter().GetValue())
			st.Bands[i].Dispatched += v
			tenant(&st.Bands[i], l["tenant"]).Dispatched += v
		}
	})
	each(c.m.drops, func(l map[string]string, m *dto.Metric) {
		if i, ok := idx[l["band"]]; ok {
			v := uint64(m.GetCounter().GetValue())
			st.Bands[i].Drops[l["reason"]] += v
			tenant(&st.Bands[i], l["tenant"]).Dropped += v
		}
	})
	each(c.m.wait, func(l map[string]string, m *dto.Metric) {
		if i, ok := idx[l["band"]]; ok {
			st.Bands[i].WaitCount += m.GetHistogram().GetSampleCount()
			st.Bands[i].WaitSeconds += m.GetHistogram().GetSampleSum()
		}
	})
	for i := range st.Bands {
		slices.SortFunc(st.Bands[i].Tenants, func(a, b TenantStatus) int {
			switch {
			case a.Name < b.Name:
				return -1
			case a.Name > b.Name:
				return 1
			}
			return 0
		})
	}
	return st
}

// each calls f with the labels and value of every child of col.
func each(col prometheus.Collector, f func(map[string]string, *dto.Metric)) {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		col.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		l := make(map[string]string, len(d.GetLabel()))
		for _, p := range d.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		f(l, &d)
	}
}

// Handler serves Status as JSON (GET and HEAD only).
func (c *Controller) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(c.Status()) // the client went away; nothing to do
	})
}

// OffHandler serves what /debug/flow shows with flow control off:
// {"enabled": false}, so the status page hides its flow card.
func OffHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"enabled": false}` + "\n"))
	})
}
