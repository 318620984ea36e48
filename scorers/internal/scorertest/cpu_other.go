//go:build !unix

package scorertest

func ProcessCPU() int64 { return 0 }
