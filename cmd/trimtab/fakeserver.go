package main

import (
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/trimtab/trimtab/sim/fakeserver"
)

func newFakeServerCmd() *cobra.Command {
	cfg := fakeserver.DefaultConfig()
	var (
		host    string
		port    int
		servers int
	)
	cmd := &cobra.Command{
		Use:   "fakeserver --port N [--model M] [--time-scale X] [--servers K]",
		Short: "Run simulated vLLM servers (the simulator's engine model behind vLLM's HTTP API)",
		Long: `fakeserver serves /v1/completions, /v1/chat/completions (streaming and not),
/v1/models, /health and /metrics (vLLM metric names) from the simulator's engine
model in wall-clock time, sped up by --time-scale. With --servers K it starts K
servers on ports N … N+K−1, named fake-0 … fake-(K−1).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Shutdown order: a signal cancels ctx; every server stops
			// accepting, drains for up to 5 s, then stops its engine.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			return fakeserver.ServePool(ctx, cfg, fakeserver.Deps{Logger: log}, host, port, servers)
		},
	}
	f := cmd.Flags()
	f.StringVar(&host, "host", "127.0.0.1", "address to listen on")
	f.IntVar(&port, "port", 8000, "first port (0: any free port)")
	f.IntVar(&servers, "servers", 1, "number of servers on consecutive ports")
	f.StringVar(&cfg.Model, "model", cfg.Model, "served model name")
	f.Float64Var(&cfg.TimeScale, "time-scale", cfg.TimeScale, "speed-up of the engine model (10 = ten times faster)")
	f.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", cfg.DefaultMaxTokens, "output tokens when a request sets no max_tokens")
	f.IntVar(&cfg.Engine.NumBlocks, "num-blocks", cfg.Engine.NumBlocks, "KV cache blocks of 16 tokens")
	f.IntVar(&cfg.Engine.MaxNumSeqs, "max-num-seqs", cfg.Engine.MaxNumSeqs, "maximum running sequences")
	f.StringSliceVar(&cfg.Adapters, "adapters", nil, "LoRA adapters served on top of --model (a request names one as its model)")
	f.IntVar(&cfg.Engine.MaxLoRAs, "max-loras", cfg.Engine.MaxLoRAs, "GPU adapter slots (0: adapters cost nothing and export no adapter metrics)")
	f.IntVar(&cfg.Engine.MaxCPULoRAs, "max-cpu-loras", cfg.Engine.MaxCPULoRAs, "adapters in the CPU cache, GPU ones included (0: --max-loras)")
	return cmd
}
