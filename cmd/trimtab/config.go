package main

import (
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
		Short: "Check profiles: prints OK per file or the exact error; exits 1 if any is bad",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			bad := 0
			for _, path := range files {
				if _, err := configs.Load(path); err != nil {
					bad++
					fmt.Fprintf(cmd.OutOrStdout(), "FAIL %s\n", err)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "OK   %s\n", path)
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
