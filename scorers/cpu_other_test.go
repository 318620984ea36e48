//go:build !unix

package scorers

func processCPU() int64 { return 0 }
