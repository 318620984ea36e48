//go:build !unix

package replica

// processCPU is not measured on this platform; the benchmark reports 0.
func processCPU() int64 { return 0 }
