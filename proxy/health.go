package proxy

import (
	"context"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/trimtab/trimtab/scheduler"
)

// Names of the grpc.health.v1 services the endpoint-picker protocol
// (Gateway API Inference Extension) probes besides "" and the
// ExternalProcessor service.
const (
	// HealthLiveness is SERVING while the server runs.
	HealthLiveness = "liveness"
	// HealthReadiness is SERVING while at least one endpoint has fresh
	// metrics (the rule of /readyz), NOT_SERVING otherwise.
	HealthReadiness = "readiness"
)

// healthRefresh is how often Watch subscribers of HealthReadiness learn
// about a pool change; Check always answers from the current pool.
const healthRefresh = time.Second

// freshEndpoints counts the pool's endpoints and those with fresh metrics.
func freshEndpoints(p *scheduler.Pool) (fresh, total int) {
	if p == nil {
		return 0, 0
	}
	for i := range p.Endpoints {
		total++
		if p.Endpoints[i].State == scheduler.StateFresh {
			fresh++
		}
	}
	return fresh, total
}

// healthServer is grpc's health server with HealthReadiness computed from
// the pool. Safe for concurrent use; after Shutdown every service reports
// NOT_SERVING.
type healthServer struct {
	*health.Server
	pool func() *scheduler.Pool
}

func newHealthServer(pool func() *scheduler.Pool, services ...string) *healthServer {
	h := &healthServer{Server: health.NewServer(), pool: pool}
	for _, s := range append(services, "", HealthLiveness) {
		h.SetServingStatus(s, healthpb.HealthCheckResponse_SERVING)
	}
	h.refresh()
	return h
}

// refresh sets HealthReadiness from the current pool (a no-op after
// Shutdown).
func (h *healthServer) refresh() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if fresh, _ := freshEndpoints(h.pool()); fresh > 0 {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.SetServingStatus(HealthReadiness, st)
}

// Check answers HealthReadiness from the pool as it is now, the other
// services from their set status.
func (h *healthServer) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() == HealthReadiness {
		h.refresh()
	}
	return h.Server.Check(ctx, req)
}

// run refreshes HealthReadiness every healthRefresh until ctx is done.
func (h *healthServer) run(ctx context.Context) {
	t := time.NewTicker(healthRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.refresh()
		}
	}
}
