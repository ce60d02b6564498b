package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/resp"
)

// startRESP serves the Redis protocol on addr (--resp-addr; clients AUTH
// with the password in passwordFile when given; eventLoop:
// --resp-event-loop) through the
// appliance's own client, so values move by memcpy to and from the box's
// segments. An empty addr serves nothing. It returns the " resp=ADDR" part
// of the listening line and the function that stops the server (before
// the appliance closes).
func startRESP(addr, passwordFile string, eventLoop bool, a *appliance.Appliance, log *slog.Logger) (desc string, stop func(), err error) {
	if addr == "" {
		if passwordFile != "" {
			return "", nil, fmt.Errorf("--resp-password-file needs --resp-addr")
		}
		return "", func() {}, nil
	}
	// Segments: GET and SET read this box's segment memory in place.
	cfg := resp.Config{Logger: log, Segments: a.SegmentMemory, EventLoop: eventLoop}
	if passwordFile != "" {
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return "", nil, fmt.Errorf("--resp-password-file: %w", err)
		}
		cfg.Password = strings.TrimSpace(string(b))
		if cfg.Password == "" {
			return "", nil, fmt.Errorf("--resp-password-file %s: empty", passwordFile)
		}
	}
	srv, err := resp.New(a.Client(), cfg)
	if err != nil {
		return "", nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--resp-addr %s: %w", addr, err)
	}
	go func() {
		if err := srv.Serve(lis); err != nil {
			log.Error("resp server", "err", err)
		}
	}()
	return " resp=" + lis.Addr().String(), func() { _ = srv.Close() }, nil
}
