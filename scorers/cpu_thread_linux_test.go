package scorers

import "syscall"

// rusageThread is Linux's RUSAGE_THREAD (not exported by syscall).
const rusageThread = 1

// threadCPU returns the CPU time (user + system) the calling OS thread has
// used, in nanoseconds; the caller locks its goroutine to the thread.
func threadCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
