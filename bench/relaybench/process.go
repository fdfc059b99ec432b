package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error
	once    sync.Once
}

var (
	procsMu sync.Mutex
	live    = map[*proc]bool{}
)

func startProc(name, bin string, args []string, dir string) (*proc, error) {
	logPath := filepath.Join(dir, "output.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = lf, lf
	// Own process group (so forked workers are killed too); SIGKILL if the
	// driver dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	procsMu.Lock()
	defer procsMu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	live[p] = true
	go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// stop terminates the process group: SIGTERM, 3 s grace, then SIGKILL.
func (p *proc) stop() {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(3 * time.Second):
		}
		syscall.Kill(-pgid, syscall.SIGKILL) // leftover workers, if any
		select {
		case <-p.exited:
		case <-time.After(3 * time.Second):
		}
		procsMu.Lock()
		delete(live, p)
		procsMu.Unlock()
	})
}

func killAll() {
	procsMu.Lock()
	ps := make([]*proc, 0, len(live))
	for p := range live {
		ps = append(ps, p)
	}
	procsMu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
}

var workDirToRemove string

func installSignalHandler() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-ch
		fmt.Fprintf(os.Stderr, "\nrelaybench: %v: stopping relays\n", s)
		killAll()
		if workDirToRemove != "" {
			os.RemoveAll(workDirToRemove)
		}
		os.Exit(130)
	}()
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	// Relay-specific logs next to output.log are useful too.
	for _, extra := range []string{"danted.log", "cache.log"} {
		if e, err := os.ReadFile(filepath.Join(filepath.Dir(p.logPath), extra)); err == nil {
			b = append(b, e...)
		}
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > 4 {
		lines = lines[len(lines)-4:]
	}
	s := strings.Join(lines, " | ")
	if len(s) > 400 {
		s = s[len(s)-400:]
	}
	return s
}

// ---------------------------------------------------------------- ports

var (
	portsMu   sync.Mutex
	usedPorts = map[int]bool{}
)

// freePort returns a loopback port that the kernel just handed out and that
// this driver has not handed out before.
func freePort() int {
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fatalf("allocating a port: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !usedPorts[port] {
			usedPorts[port] = true
			return port
		}
	}
}
