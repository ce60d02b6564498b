package main

import (
	"log/slog"
	"net/http"

	"google.golang.org/grpc"
)

func grpcServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20)}
}

// httpHandler serves the REST API, metrics and web UI.
func httpHandler(rm *runningMaster, f *masterFlags, log *slog.Logger) (http.Handler, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	return mux, nil
}
