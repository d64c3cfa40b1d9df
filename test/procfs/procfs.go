// Package procfs reads what the tests and benchmarks need of Linux's /proc/<pid>/stat: a
// process's command name, state, parent and CPU time, for one process or for every one. The
// harness uses it to find a node's process tree and wait until it is gone; the benchmarks to
// measure CPU time.
package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Stat is what /proc/<pid>/stat says of a process.
type Stat struct {
	PID int
	// Comm is the command name (at most 15 bytes; it may hold spaces and parentheses).
	Comm string
	// State is R, S, D, Z, T...
	State byte
	PPID  int
	// CPU is the time it ran so far, user and system.
	CPU time.Duration
}

// Zombie is true for a process that exited and waits for its parent to reap it: gone, for
// whoever waits for it to stop.
func (s Stat) Zombie() bool { return s.State == 'Z' }

// clockTicks is USER_HZ, the unit of utime and stime: 100 on Linux.
const clockTicks = 100

// Parse reads the content of a stat file: "pid (comm) state ppid ... utime stime ...". The
// command name is read up to the last ')', since it may hold spaces and parentheses itself.
func Parse(text string) (Stat, error) {
	open, end := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
	if open < 1 || end < open {
		return Stat{}, fmt.Errorf("not a /proc/<pid>/stat line: %q", text)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(text[:open]))
	if err != nil {
		return Stat{}, fmt.Errorf("its pid: %w", err)
	}
	// After the name: state(0) ppid(1) pgrp session tty_nr tpgid flags minflt cminflt majflt
	// cmajflt utime(11) stime(12) ...
	fields := strings.Fields(text[end+1:])
	if len(fields) < 13 || len(fields[0]) != 1 {
		return Stat{}, fmt.Errorf("not a /proc/<pid>/stat line: %q", text)
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return Stat{}, fmt.Errorf("its parent: %w", err)
	}
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("its utime: %w", err)
	}
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("its stime: %w", err)
	}
	return Stat{PID: pid, Comm: text[open+1 : end], State: fields[0][0], PPID: ppid,
		CPU: time.Duration(utime+stime) * time.Second / clockTicks}, nil
}

// Read reads process pid's stat; an error when it does not exist (any more).
func Read(pid int) (Stat, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	st, err := Parse(string(raw))
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// Alive is true while pid is a process that has not exited (a zombie has).
func Alive(pid int) bool {
	st, err := Read(pid)
	return err == nil && !st.Zombie()
}

// All is every process readable now (one that exits while it reads is left out).
func All() []Stat {
	entries, _ := os.ReadDir("/proc")
	var out []Stat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := Read(pid); err == nil {
			out = append(out, st)
		}
	}
	return out
}

// Children are the processes whose parent is pid now.
func Children(pid int) []int {
	var out []int
	for _, st := range All() {
		if st.PPID == pid {
			out = append(out, st.PID)
		}
	}
	return out
}
