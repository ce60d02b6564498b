package rest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Serve serves Handler on l until ctx ends, then shuts down: open event
// streams end (their request contexts derive from ctx) and in-flight requests
// get up to 5 s to finish. It returns nil after a shutdown caused by ctx.
// Binding (loopback by default) is the caller's choice of l.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	cancel() // ends SSE streams so Shutdown can finish
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	err := hs.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
