package main

import (
	"log"
	"os"
	"strings"
	"syscall"
)

// godebugSetting is what Go's HTTP/2 server looks for in GODEBUG, once, at
// init, before it offers extended CONNECT.
const godebugSetting = "http2xconnect=1"

// extendedConnectEnabled reports whether this process started with
// extended CONNECT on, as net/http decides it: GODEBUG contains
// http2xconnect=1.
func extendedConnectEnabled() bool {
	return strings.Contains(os.Getenv("GODEBUG"), godebugSetting)
}

// godebugWithXConnect returns GODEBUG with http2xconnect=1 added, and
// whether it needed adding: a GODEBUG that already has an http2xconnect
// setting, whatever its value, is the user's choice and kept as it is.
func godebugWithXConnect(godebug string) (string, bool) {
	for _, kv := range strings.Split(godebug, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(kv), "="); k == "http2xconnect" {
			return godebug, false
		}
	}
	if strings.TrimSpace(godebug) == "" {
		return godebugSetting, true
	}
	return godebug + "," + godebugSetting, true
}

// ensureExtendedConnect re-executes this binary with http2xconnect=1 added
// to GODEBUG when GODEBUG has no http2xconnect setting. It returns only
// when no re-exec is needed, or when it failed (logged: the server then
// runs with WebSockets over HTTP/1.1 only).
func ensureExtendedConnect() {
	godebug, changed := godebugWithXConnect(os.Getenv("GODEBUG"))
	if !changed {
		if !extendedConnectEnabled() {
			log.Printf("GODEBUG=%s turns extended CONNECT off: browsers will open WebSockets over HTTP/1.1",
				os.Getenv("GODEBUG"))
		}
		return
	}
	exe, err := os.Executable()
	if err != nil {
		log.Printf("cannot re-execute with GODEBUG=%s (%v): WebSockets over HTTP/1.1 only; "+
			"set GODEBUG=%s yourself", godebug, err, godebugSetting)
		return
	}
	env := withEnv(os.Environ(), "GODEBUG", godebug)
	log.Printf("re-executing %s with GODEBUG=%s, for extended CONNECT (RFC 8441); "+
		"set GODEBUG=%s yourself to skip this", exe, godebug, godebugSetting)
	err = syscall.Exec(exe, os.Args, env)
	log.Printf("re-executing with GODEBUG=%s failed (%v): WebSockets over HTTP/1.1 only; "+
		"set GODEBUG=%s yourself", godebug, err, godebugSetting)
}

// withEnv returns env with key set to value: a process's environment may
// hold a variable twice, and Go reads the first, so every old entry goes.
func withEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}
