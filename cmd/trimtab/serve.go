package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/trimtab/trimtab/configs"
)

func newServeCmd() *cobra.Command {
	var (
		path      string
		logLevel  string
		logFormat string
	)
	c := &cobra.Command{
		Use:   "serve --config FILE",
		Short: "Run the scheduler: OpenAI-compatible proxy, Envoy ext_proc endpoint picker and admin server",
		Long: `serve discovers model-server endpoints, scrapes their metrics, and routes requests
arriving on the OpenAI-compatible proxy (default :8080) or from Envoy's ext_proc
filter (default :9002). The admin server (default 127.0.0.1:9090, loopback only)
serves /metrics, /healthz, /readyz, /debug/* and the status page /ui; with
server.admin.token or token_file set, /debug/* and /ui need that bearer token.

SIGHUP or an edit of the profile reloads it: new weights and adaptive settings
apply at once; a bad profile, or a change that needs a restart, is refused and
the running profile kept. SIGTERM drains in-flight requests (server.drain_timeout).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			f, err := configs.Load(path)
			if err != nil {
				return err
			}
			tr, err := newTracing(f.Tracing)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			// Last in the shutdown order: after the servers drained and the
			// loop stopped (svc.Run returned), flush their spans.
			defer tr.Shutdown(5*time.Second, log)
			svc, err := newService(f, serviceOptions{Logger: log, Tracer: tr.Tracer()})
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
			log.Info("trimtab serving", "version", buildVersion(), "profile", path,
				"http", svc.srv.HTTP.Addr, "ext_proc", svc.srv.ExtProc.Addr, "admin", svc.srv.Admin.Addr,
				"adaptive", f.Adaptive.Enabled, "tracing", f.Tracing.Enabled, "replica_sync", f.Replicas.Enabled)
			err = svc.Run(ctx)
			log.Info("trimtab stopped", "error", err)
			return err
		},
	}
	c.Flags().StringVarP(&path, "config", "c", "", "profile YAML file (required)")
	c.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	c.Flags().StringVar(&logFormat, "log-format", "text", "text or json")
	_ = c.MarkFlagRequired("config")
	return c
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q, want text or json", format)
}
