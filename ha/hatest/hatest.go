// Package hatest starts a real single-member etcd server on loopback for
// tests of HA mode (package ha and the multi-process tests). Only tests
// import it.
package hatest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartEtcd starts an embedded etcd with its data in a temp dir and returns a
// stop function (safe to call twice; also run at cleanup) and the client URL.
// It skips the test, saying why, when etcd cannot start on loopback.
func StartEtcd(t testing.TB) (stop func(), endpoint string) {
	t.Helper()
	var lastErr error
	for range 3 {
		cfg := embed.NewConfig()
		cfg.Name = "test"
		cfg.Dir = t.TempDir()
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		curl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
		purl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
		cfg.ListenClientUrls = []url.URL{*curl}
		cfg.AdvertiseClientUrls = []url.URL{*curl}
		cfg.ListenPeerUrls = []url.URL{*purl}
		cfg.AdvertisePeerUrls = []url.URL{*purl}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			e.Close()
			lastErr = errors.New("embedded etcd not ready after 30s")
			continue
		}
		stop := sync.OnceFunc(e.Close) // embed.Etcd.Close panics if called twice
		t.Cleanup(stop)
		return stop, curl.String()
	}
	t.Skipf("embedded etcd cannot start on loopback: %v", lastErr)
	return nil, ""
}

// StartEtcdProcess starts an embedded etcd, as StartEtcd, for a helper
// process that runs nothing else (so a test can SIGSTOP it). It panics when
// etcd cannot start.
func StartEtcdProcess() (stop func(), endpoint string) {
	dir, err := os.MkdirTemp("", "kvtier-etcd-")
	if err != nil {
		panic(err)
	}
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	curl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port()))
	purl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port()))
	cfg.ListenClientUrls = []url.URL{*curl}
	cfg.AdvertiseClientUrls = []url.URL{*curl}
	cfg.ListenPeerUrls = []url.URL{*purl}
	cfg.AdvertisePeerUrls = []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		panic(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		panic("embedded etcd not ready after 30s")
	}
	return sync.OnceFunc(func() { e.Close(); os.RemoveAll(dir) }), curl.String()
}
