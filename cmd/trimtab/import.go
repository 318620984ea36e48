package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/trimtab/trimtab/configs"
)

func newConfigImportCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "import FILE [-o OUT]",
		Short: "Translate an llm-d-router / Inference Extension EndpointPickerConfig into a trimtab profile",
		Long: `import reads an EndpointPickerConfig (the endpoint picker's plugins and
scheduling profiles) and writes the equivalent trimtab profile to standard
output, or to OUT with -o. Scorers, pickers and parameters with a trimtab
equivalent are carried over with their weights; everything else is named,
one line each, in comments at the top of the profile and on standard error.
The profile has no endpoints: section: add one before serving with it.
The input may be at most 1 MiB and 256 plugins; SIGTERM or Ctrl-C stops the command.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := configs.ReadFile(cmd.Context(), args[0], configs.MaxImportBytes)
			if err != nil {
				return err
			}
			im, err := configs.ImportEndpointPicker(data)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			for _, u := range im.Unmapped {
				fmt.Fprintf(cmd.ErrOrStderr(), "not carried over: %s\n", u)
			}
			if out == "" {
				_, err = cmd.OutOrStdout().Write(im.Profile)
				return err
			}
			return os.WriteFile(out, im.Profile, 0o644)
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "write the profile to this file instead of standard output")
	return c
}
