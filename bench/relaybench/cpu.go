package main

import (
	"encoding/binary"
	"os"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// clockTicks reads AT_CLKTCK from the auxiliary vector (sysconf(_SC_CLK_TCK)
// without cgo); falls back to 100 Hz.
func clockTicks() float64 {
	b, err := os.ReadFile("/proc/self/auxv")
	if err == nil {
		for i := 0; i+16 <= len(b); i += 16 {
			typ := binary.NativeEndian.Uint64(b[i:])
			val := binary.NativeEndian.Uint64(b[i+8:])
			if typ == 17 && val > 0 { // AT_CLKTCK
				return float64(val)
			}
		}
	}
	return 100
}

type procStat struct {
	ppid  int
	ticks uint64 // utime + stime + cutime + cstime
}

func readProcStats() map[int]procStat {
	m := map[int]procStat{}
	procs, err := procfs.AllProcs()
	if err != nil {
		return m
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // gone meanwhile
		}
		// Reaped children's time is in cutime/cstime; negative values
		// (the kernel's long type) are treated as none.
		m[p.PID] = procStat{ppid: st.PPID, ticks: uint64(st.UTime + st.STime + uint(max(st.CUTime, 0)) + uint(max(st.CSTime, 0)))}
	}
	return m
}

// treeCPUSeconds sums the CPU time of the given processes and all their live
// descendants (reaped children are included through cutime/cstime).
func treeCPUSeconds(roots []int, clkTck float64) (float64, int) {
	st := readProcStats()
	kids := map[int][]int{}
	for pid, s := range st {
		kids[s.ppid] = append(kids[s.ppid], pid)
	}
	seen := map[int]bool{}
	var ticks uint64
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if s, ok := st[pid]; ok {
			ticks += s.ticks
		}
		queue = append(queue, kids[pid]...)
	}
	return float64(ticks) / clkTck, len(seen)
}

func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
