//go:build unix

package scorertest

import "syscall"

// ProcessCPU returns the CPU time (user + system) the test process has
// used, in nanoseconds. On a shared machine it measures the work done
// rather than the wall time spent waiting for a core.
func ProcessCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
