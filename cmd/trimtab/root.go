package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise it comes from the module build info.
var version = ""

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "trimtab",
		Short:         "Endpoint scheduler for LLM inference gateways with self-tuning weights",
		Long:          "trimtab picks the model-server pod for every LLM request as a weighted sum of\naffinity scorers (prefix cache, session, LoRA) and load scorers (queue, KV cache,\nin-flight), and retunes the weights as load becomes uneven.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Every subcommand is listed here, explicitly.
	root.AddCommand(
		newVersionCmd(),
		newConfigCmd(),
		newServeCmd(),
		newDemoCmd(),
		newBenchCmd(),
		newSimCmd(),
		newFakeServerCmd(),
	)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the trimtab version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "trimtab %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
