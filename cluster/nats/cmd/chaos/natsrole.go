package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// natsMain runs a NATS server with JetStream, as nats-server -js -sd DIR
// does, until SIGTERM or SIGINT.
func natsMain(args []string) error {
	fs := flag.NewFlagSet("chaos nats", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:4222", "client address")
	dir := fs.String("sd", "", "JetStream store directory (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("-sd is required")
	}
	host, portStr, err := net.SplitHostPort(*addr)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return err
	}
	s, err := server.NewServer(&server.Options{Host: host, Port: port, JetStream: true, StoreDir: *dir, NoSigs: true})
	if err != nil {
		return err
	}
	s.ConfigureLogger()
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return errors.New("the server did not start in 10 s")
	}
	fmt.Printf("ready %s\n", s.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}
