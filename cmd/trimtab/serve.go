package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/telemetry"
)

func newServeCmd() *cobra.Command {
	var (
		path      string
		logLevel  string
		logFormat string
		logLimit  time.Duration
	)
	c := &cobra.Command{
		Use:   "serve --config FILE",
		Short: "Run the scheduler: OpenAI-compatible proxy, Envoy ext_proc endpoint picker and admin server",
		Long: `serve discovers model-server endpoints, scrapes their metrics, and routes requests
arriving on the OpenAI-compatible proxy (default :8080) or from Envoy's ext_proc
filter (default :9002). The admin server (default 127.0.0.1:9090, loopback only)
serves /metrics, /healthz, /readyz, /debug/* and the status page /ui; with
server.admin.token or token_file set, /debug/* and /ui need that bearer token.

At start serve checks the static endpoints file, binds every listener (a busy
port fails start-up, naming its setting) and logs "trimtab serving" once all are
bound and discovery has delivered the first endpoint list.

SIGHUP or an edit of the profile reloads it: new weights and adaptive settings
apply at once; a bad profile, or a change that needs a restart, is refused and
the running profile kept. SIGTERM drains in-flight requests (server.drain_timeout).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, flushLog, err := newLogger(logLevel, logFormat, cmd.ErrOrStderr(), logLimit)
			if err != nil {
				return err
			}
			defer flushLog()
			f, err := configs.Load(path)
			if err != nil {
				return err
			}
			// Files, then ports: every start-up error is reported before
			// anything runs, each naming its setting.
			if err := f.CheckFiles(); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			lns, err := bindListeners(f)
			if err != nil {
				return err
			}
			defer lns.close()
			warnOpenAdmin(log, f)
			tr, err := newTracing(f.Tracing)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			// Last in the shutdown order: after the servers drained and the
			// loop stopped (svc.Run returned), flush their spans.
			defer tr.Shutdown(5*time.Second, log)
			svc, err := newService(f, serviceOptions{Logger: log, Tracer: tr.Tracer(),
				HTTP: lns.http, ExtProc: lns.extProc, Admin: lns.admin, Replica: lns.replica})
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			watch := configs.Watch{Path: path, Apply: svc.reload, Trigger: hup, Logger: log}
			watched := make(chan error, 1)
			go func() { watched <- watch.Run(ctx) }()
			// The watcher stops with the service (cancel) and is waited for.
			defer func() { cancel(); <-watched }()
			// "serving" once the listeners are bound (above) and discovery
			// has delivered its first endpoint list.
			up := make(chan struct{})
			go func() {
				defer close(up)
				if svc.discovered(ctx) {
					log.Info("trimtab serving", append([]any{"version", buildVersion(), "profile", path}, append(lns.attrs(),
						"adaptive", f.Adaptive.Enabled, "tracing", f.Tracing.Enabled, "replica_sync", f.Replicas.Enabled)...)...)
				}
			}()
			defer func() { cancel(); <-up }()
			err = svc.Run(ctx)
			log.Info("trimtab stopped", "err", err)
			return err
		},
	}
	c.Flags().StringVarP(&path, "config", "c", "", "profile YAML file (required)")
	c.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	c.Flags().StringVar(&logFormat, "log-format", "text", "text or json")
	c.Flags().DurationVar(&logLimit, "log-limit", 10*time.Second, "repeated log lines (same level, message, component, endpoint): 5 per this interval, then a suppressed=N count; 0 turns limiting off")
	_ = c.MarkFlagRequired("config")
	return c
}

// newLogger returns the logger of serve, writing to w (standard error).
// With limit > 0, repeated records are rate-limited
// (telemetry.LimitHandler: 5 of a kind per limit, then a count); flush
// reports counts still owed and is called at exit.
func newLogger(level, format string, w io.Writer, limit time.Duration) (log *slog.Logger, flush func(), err error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, nil, fmt.Errorf("--log-format: %q, want text or json", format)
	}
	switch {
	case limit < 0:
		return nil, nil, fmt.Errorf("--log-limit: %v, want ≥ 0 (0 turns limiting off)", limit)
	case limit == 0:
		return slog.New(h), func() {}, nil
	}
	cfg := telemetry.DefaultLimitConfig()
	cfg.Interval = limit
	lh, err := telemetry.NewLimitHandler(h, cfg, telemetry.LimitDeps{})
	if err != nil {
		return nil, nil, fmt.Errorf("--log-limit: %w", err)
	}
	return slog.New(lh), func() { _ = lh.Flush(context.Background()) }, nil
}

// listeners are serve's bound listeners; nil for a server that is off.
type listeners struct {
	http, extProc, admin, replica net.Listener
}

// bindListeners binds every listener the profile enables, so a busy port
// fails start-up before anything runs. Errors name the setting:
// "server.admin.addr: listen tcp 127.0.0.1:9090: bind: address already in
// use". On error nothing stays bound.
func bindListeners(f *configs.File) (*listeners, error) {
	l := &listeners{}
	for _, b := range []struct {
		on      bool
		setting string
		addr    string
		into    *net.Listener
	}{
		{f.Server.HTTP.Enabled, "server.http.addr", f.Server.HTTP.Addr, &l.http},
		{f.Server.ExtProc.Enabled, "server.ext_proc.addr", f.Server.ExtProc.Addr, &l.extProc},
		{f.Server.Admin.Enabled, "server.admin.addr", f.Server.Admin.Addr, &l.admin},
		{f.Replicas.Enabled, "replicas.listen", f.Replicas.Listen, &l.replica},
	} {
		if !b.on {
			continue
		}
		ln, err := net.Listen("tcp", b.addr)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("%s: %w", b.setting, err)
		}
		*b.into = ln
	}
	return l, nil
}

// close closes every listener; the servers close theirs when they stop,
// so this matters only when serve fails before running them.
func (l *listeners) close() {
	for _, ln := range []net.Listener{l.http, l.extProc, l.admin, l.replica} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// attrs are the bound addresses as log attributes.
func (l *listeners) attrs() []any {
	var out []any
	for _, a := range []struct {
		key string
		ln  net.Listener
	}{{"http", l.http}, {"ext_proc", l.extProc}, {"admin", l.admin}, {"replica_listen", l.replica}} {
		if a.ln != nil {
			out = append(out, a.key, a.ln.Addr().String())
		}
	}
	return out
}
