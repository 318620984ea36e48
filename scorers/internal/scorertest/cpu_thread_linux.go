package scorertest

import (
	"syscall"
	"unsafe"
)

// clockThreadCPUTime is Linux's CLOCK_THREAD_CPUTIME_ID.
const clockThreadCPUTime = 3

// ThreadCPU returns the CPU time the calling OS thread has used, in
// nanoseconds; the caller locks its goroutine to the thread. It reads
// clock_gettime(CLOCK_THREAD_CPUTIME_ID), which includes the running
// slice, where getrusage(RUSAGE_THREAD) advances only at scheduler ticks
// and so cannot time a chunk of a few dozen picks.
func ThreadCPU() int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return ts.Nano()
}
