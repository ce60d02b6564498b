package appliance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
)

// diskIDFile, in the SSD directory, holds the directory's identity: 16
// lower-case hexadecimal digits and a newline, written once (O_EXCL) and
// never changed. The SSD tier leaves other names in its directory alone.
const diskIDFile = "appliance-id"

// randomHex returns n random bytes as hexadecimal.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// DiskID returns the identity of the SSD directory dir, creating it (and
// dir) on first use.
func DiskID(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("appliance: SSD directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, diskIDFile)
	for range 2 {
		raw, err := os.ReadFile(path)
		if err == nil {
			id := strings.TrimSpace(string(raw))
			if len(id) != 16 || strings.Trim(id, "0123456789abcdef") != "" {
				return "", fmt.Errorf("appliance: %s holds %q, not an identity (16 hex digits): remove it to make a new one", path, raw)
			}
			return id, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("appliance: read %s: %w", path, err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue // another process wrote it meanwhile: read theirs
		}
		if err != nil {
			return "", fmt.Errorf("appliance: create %s: %w", path, err)
		}
		id := randomHex(8)
		_, err = f.WriteString(id + "\n")
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(path)
			return "", fmt.Errorf("appliance: write %s: %w", path, err)
		}
		if d, err := os.Open(dir); err == nil {
			_ = d.Sync()
			d.Close()
		}
		return id, nil
	}
	return "", fmt.Errorf("appliance: %s keeps changing", path)
}

// DefaultName is the appliance name used when none is configured: unique
// per host and stable across restarts of the same SSD directory.
//
//   - With an SSD directory: "<hostname>-<first 6 digits of its DiskID>".
//   - Without one, with a fixed data port: "<hostname>-p<port>" (two
//     processes cannot listen on one port).
//   - Otherwise "<hostname>-<6 random hex digits>", new at every start
//     (nothing survives such a restart anyway).
func DefaultName(ssdDir, dataAddr string) (string, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "kvtier"
	}
	if ssdDir != "" {
		id, err := DiskID(ssdDir)
		if err != nil {
			return "", err
		}
		return host + "-" + id[:6], nil
	}
	if _, port, err := net.SplitHostPort(dataAddr); err == nil && port != "" && port != "0" {
		return host + "-p" + port, nil
	}
	return host + "-" + randomHex(3), nil
}

// mountRetry is how long Start keeps retrying a mount refused because the
// name is held by another live incarnation: a kill -9'd predecessor stops
// heartbeating and the master hands the name over after its
// RestartTakeover (default 3 s); a second live appliance under the same
// name keeps it, and this one then fails to start.
const mountRetry = 10 * time.Second

// mountSegment mounts one DRAM segment, waiting out a predecessor that is
// still considered live.
func (a *Appliance) mountSegment(ctx context.Context, name string, mem []byte) error {
	err := a.client.ServeSegment(ctx, name, mem)
	deadline := time.Now().Add(mountRetry)
	for kverr.Is(err, kverr.IllegalClient) && time.Now().Before(deadline) {
		a.log.Warn("name held by another incarnation; waiting for it to go silent", "name", a.cfg.Name, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		var seg *kvtierpb.Segment
		if seg, err = a.client.MemorySegment(name); err == nil {
			err = a.client.MountSegment(ctx, seg)
		}
	}
	if err != nil {
		return fmt.Errorf("appliance: mount segment %s: %w", name, err)
	}
	return nil
}
