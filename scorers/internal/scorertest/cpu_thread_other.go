//go:build !linux

package scorertest

func ThreadCPU() int64 { return 0 }
