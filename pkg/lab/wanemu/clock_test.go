package wanemu

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The clock the sched engine reads (vDSO) against x/sys's ClockGettime (a
// system call) and a bare system call: what a per-packet clock read or
// system call costs on this machine (docs/lab.md).
//
//	go test -run '^$' -bench 'Clock|Syscall' ./pkg/lab/wanemu/
func BenchmarkClockNowNs(b *testing.B) {
	var s int64
	for b.Loop() {
		s += nowNs()
	}
	_ = s
}

func BenchmarkClockGettimeSyscall(b *testing.B) {
	var ts unix.Timespec
	for b.Loop() {
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	}
}

func BenchmarkSyscallGetppid(b *testing.B) {
	for b.Loop() {
		unix.Getppid()
	}
}
