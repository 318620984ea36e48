//go:build !unix

package bench

import "time"

// ProcessCPU returns 0: process CPU time is read on unix only.
func ProcessCPU() time.Duration { return 0 }
