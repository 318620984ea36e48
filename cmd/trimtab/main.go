// Command trimtab is the one trimtab binary: the scheduler service (serve),
// the one-command demo, the simulator and config tooling. It is the only
// place that reads flags, environment and files, builds components and
// runs them, and it owns shutdown order.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	if err := root.ExecuteContext(ctx); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "trimtab:", err)
		os.Exit(1)
	}
}

// exitError carries an exit code for failures already reported to the
// user (config validate prints its own per-file errors).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
