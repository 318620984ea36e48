//go:build !linux

package scorers

func threadCPU() int64 { return 0 }
