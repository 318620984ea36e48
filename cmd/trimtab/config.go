package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/trimtab/trimtab/configs"
)

func newConfigCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "Work with trimtab profiles",
	}
	c.AddCommand(&cobra.Command{
		Use:   "validate FILE...",
		Short: "Check profiles and endpoints files: prints OK per file or the exact error; exits 1 if any is bad",
		Long: `validate checks each profile as serve would load it, including the static
endpoints file it names (endpoints.mode static): the file must exist and every
entry parse. A static endpoints file (a top-level endpoints: list) given on its
own is checked as one.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			bad := 0
			for _, path := range files {
				what, err := validateFile(cmd.Context(), path)
				if err != nil {
					bad++
					fmt.Fprintf(cmd.OutOrStdout(), "FAIL %s\n", err)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "OK   %s%s\n", path, what)
			}
			if bad > 0 {
				return exitError{code: 1}
			}
			return nil
		},
	})
	c.AddCommand(newConfigImportCmd())
	return c
}

// validateFile checks one file given to config validate: a static
// endpoints file as one (what says so and counts the endpoints), anything
// else as a profile together with the files it names.
func validateFile(ctx context.Context, path string) (what string, err error) {
	data, err := configs.ReadFile(ctx, path, configs.MaxFileBytes)
	if err != nil {
		return "", err
	}
	if configs.IsEndpointsFile(data) {
		n, err := configs.CheckEndpointsFile(path)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf(" (endpoints file: %d endpoints)", n), nil
	}
	f, err := configs.Load(path)
	if err != nil {
		return "", err
	}
	if err := f.CheckFiles(); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return "", nil
}
