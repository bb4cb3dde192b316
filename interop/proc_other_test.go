//go:build !unix

package interop

import "os/exec"

// ownGroup does nothing here: process groups are a Unix notion.
func ownGroup(*exec.Cmd) {}

// killGroup kills cmd's process only: what it forked may outlive it.
func killGroup(cmd *exec.Cmd) error { return cmd.Process.Kill() }
