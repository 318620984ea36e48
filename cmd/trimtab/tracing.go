package main

import (
	"fmt"
	"os"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/telemetry"
)

// newTracing builds the tracer provider of the tracing: section; nil (a
// nil Tracer, a no-op Shutdown) when tracing is off.
func newTracing(cfg configs.TracingConfig) (*telemetry.Provider, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	var pem []byte
	if cfg.CAFile != "" {
		var err error
		if pem, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("tracing.ca_file: %w", err)
		}
	}
	return telemetry.New(telemetry.Options{Endpoint: cfg.Endpoint, Insecure: cfg.Insecure, CAPEM: pem,
		ServiceName: cfg.ServiceName, Version: buildVersion(), SampleRatio: cfg.SampleRatio, Timeout: cfg.Timeout})
}
