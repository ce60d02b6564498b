package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvtier/kvtier/internal/auth"
	"github.com/spf13/cobra"
)

// dataTLSFlags serve an appliance's data port (the transfer engine) over
// TLS. The master hands the data endpoint out as tls://host:port, and
// clients verify it with the CA they trust the master with (--tls-ca,
// KVTIER_TLS_CA). `standalone` has no such flags: its --tls-cert covers the
// data port too.
type dataTLSFlags struct {
	cert, key string
}

func (f *dataTLSFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.cert, "data-tls-cert", "", "PEM certificate: serve the data port over TLS; clients need the CA that signed it (--tls-ca / KVTIER_TLS_CA); re-read on SIGHUP")
	cmd.Flags().StringVar(&f.key, "data-tls-key", "", "PEM key of --data-tls-cert")
}

// load returns the data port's server TLS (nil without the flags) and, when
// set, re-reads the files on SIGHUP until ctx ends.
func (f *dataTLSFlags) load(ctx context.Context, log *slog.Logger) (*tls.Config, error) {
	if f.cert == "" && f.key == "" {
		return nil, nil
	}
	if f.cert == "" || f.key == "" {
		return nil, usagef("--data-tls-cert and --data-tls-key go together")
	}
	st, err := auth.NewServerTLS(f.cert, f.key, "")
	if err != nil {
		return nil, usagef("--data-tls-cert/--data-tls-key: %v", err)
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
			}
			if err := st.Reload(); err != nil {
				log.Error("SIGHUP: data-port TLS material not reloaded, the previous stays", "err", err)
			} else {
				log.Info("SIGHUP: data-port TLS material reloaded")
			}
		}
	}()
	return st.Config(), nil
}
