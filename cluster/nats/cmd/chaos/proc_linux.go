package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd when the driver dies, so that no
// instance or nats-server outlives an interrupted run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
