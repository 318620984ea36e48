//go:build unix

package bench

import (
	"syscall"
	"time"
)

// ProcessCPU returns this process's CPU time so far, user plus system
// (for Deps.CPU).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
