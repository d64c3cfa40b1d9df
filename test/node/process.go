package node

import (
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// Process is a process the harness started: the node's, the control plane's, the operator's.
type Process struct {
	Cmd  *exec.Cmd
	done chan struct{}
}

// StartProcess starts cmd in a process group of its own (OwnProcessGroup) unless cmd says
// otherwise, and reaps it when it ends.
func StartProcess(cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = OwnProcessGroup()
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop asks the process to end (SIGTERM), kills it after grace, and waits for it.
func (p *Process) Stop(grace time.Duration) {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// OwnProcessGroup is how the harness starts the cluster's processes: in a process group of their
// own, so that Ctrl-C in a terminal (sent to the whole foreground group) reaches the harness
// alone, which stops them in order (pods first); killed with the harness if it dies.
func OwnProcessGroup() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
