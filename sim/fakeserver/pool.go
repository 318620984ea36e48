package fakeserver

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"golang.org/x/sync/errgroup"
)

// ServePool runs n servers of cfg, named fake-0 … fake-(n−1) when n > 1,
// sharing one response store (deps.Responses, or a new one with the
// default bounds), on host at ports port … port+n−1 (port 0: any free port each), until ctx
// is done or one fails; then every server stops accepting, drains and
// stops its engine, and ServePool returns the first error.
func ServePool(ctx context.Context, cfg Config, deps Deps, host string, port, n int) error {
	if n < 1 {
		return fmt.Errorf("fake server pool: %d servers, want at least 1", n)
	}
	if port < 0 || port+n-1 > 65535 {
		return fmt.Errorf("fake server pool: first port %d does not leave room for %d servers", port, n)
	}
	if deps.Responses == nil {
		deps.Responses, _ = NewResponseStore(DefaultStoredResponses, DefaultStoredBytes)
	}
	g, gctx := errgroup.WithContext(ctx)
	for i := range n {
		c := cfg
		if n > 1 {
			c.Name = "fake-" + strconv.Itoa(i)
		}
		s, err := New(c, deps)
		if err == nil {
			p := 0
			if port > 0 {
				p = port + i
			}
			var ln net.Listener
			if ln, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p))); err == nil {
				g.Go(func() error { return s.Serve(gctx, ln) })
				continue
			}
		}
		g.Go(func() error { return err }) // stops the ones started
		break
	}
	return g.Wait()
}
