package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/auth"
	"github.com/kvtier/kvtier/nof/initiator"
)

// nofControllers caches one NVMe/TCP controller per (target, subsystem): a
// GPU node reads NOF replicas straight from the appliance's namespace.
type nofControllers struct {
	mu    sync.Mutex
	ctrls map[string]*initiator.Controller // guarded by mu: "addr|nqn" -> controller

	secret, ctrlSecret *auth.Secret // DH-HMAC-CHAP (Config.NVMeSecret, NVMeCtrlSecret)
}

// nvmeSecrets loads Config.NVMeSecret and NVMeCtrlSecret.
func nvmeSecrets(cfg Config) (host, ctrl *auth.Secret, err error) {
	if cfg.NVMeSecret != "" {
		if host, err = auth.LoadSecret(cfg.NVMeSecret); err != nil {
			return nil, nil, kverr.New(kverr.InvalidParams, "", "client: NVMe secret: %v", err)
		}
	}
	if cfg.NVMeCtrlSecret != "" {
		if host == nil {
			return nil, nil, kverr.New(kverr.InvalidParams, "", "client: an NVMe controller secret needs an NVMe host secret")
		}
		if ctrl, err = auth.LoadSecret(cfg.NVMeCtrlSecret); err != nil {
			return nil, nil, kverr.New(kverr.InvalidParams, "", "client: NVMe controller secret: %v", err)
		}
	}
	return host, ctrl, nil
}

// HostNQN is the NVMe host NQN this client connects with.
func (c *Client) HostNQN() string {
	if c.cfg.NVMeHostNQN != "" {
		return c.cfg.NVMeHostNQN
	}
	return "nqn.2014-08.org.nvmexpress:kvtier:" + nqnUnsafe(c.cfg.ClientID)
}

func nqnUnsafe(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

func (c *Client) nofController(ctx context.Context, r *kvtierpb.Replica) (*initiator.Controller, error) {
	key := r.TargetAddr + "|" + r.Nqn
	c.nof.mu.Lock()
	defer c.nof.mu.Unlock()
	if ctrl, ok := c.nof.ctrls[key]; ok {
		return ctrl, nil
	}
	// Dialing under the lock serialises the first connection to a target;
	// later I/O only takes the lock for the map look-up.
	ctrl, err := initiator.Dial(ctx, r.TargetAddr, initiator.Config{SubNQN: r.Nqn, HostNQN: c.HostNQN(), IOQueues: 2,
		DHCHAPSecret: c.nof.secret, DHCHAPCtrlSecret: c.nof.ctrlSecret})
	if err != nil {
		return nil, kverr.New(kverr.TransferFail, "", "NVMe/TCP connect %s (%s): %v", r.TargetAddr, r.Nqn, err)
	}
	if c.nof.ctrls == nil {
		c.nof.ctrls = map[string]*initiator.Controller{}
	}
	c.nof.ctrls[key] = ctrl
	return ctrl, nil
}

// dropNOF forgets a controller after an I/O error so the next access redials.
func (c *Client) dropNOF(r *kvtierpb.Replica, ctrl *initiator.Controller) {
	key := r.TargetAddr + "|" + r.Nqn
	c.nof.mu.Lock()
	if c.nof.ctrls[key] == ctrl {
		delete(c.nof.ctrls, key)
	}
	c.nof.mu.Unlock()
	_ = ctrl.Close()
}

func (c *Client) closeNOF() error {
	c.nof.mu.Lock()
	defer c.nof.mu.Unlock()
	var err error
	for k, ctrl := range c.nof.ctrls {
		err = errors.Join(err, ctrl.Close())
		delete(c.nof.ctrls, k)
	}
	return err
}

func blockSizeOf(ctrl *initiator.Controller, nsid uint32) (int, error) {
	for _, ns := range ctrl.Namespaces() {
		if ns.NSID == nsid {
			return ns.BlockSize, nil
		}
	}
	return 0, fmt.Errorf("namespace %d not exported", nsid)
}

// nofTarget returns the controller serving r and the namespace's block size.
func (c *Client) nofTarget(ctx context.Context, r *kvtierpb.Replica) (*initiator.Controller, int, error) {
	ctrl, err := c.nofController(ctx, r)
	if err != nil {
		return nil, 0, err
	}
	bs, err := blockSizeOf(ctrl, r.Nsid)
	if err != nil {
		return nil, 0, kverr.New(kverr.TransferFail, "", "NOF replica on %s: %v", r.Nqn, err)
	}
	return ctrl, bs, nil
}

// readNOF reads a NOF replica. The master allocates NOF space in whole
// blocks, so the block-rounded tail lies inside the replica's extent.
func (c *Client) readNOF(ctx context.Context, r *kvtierpb.Replica, dst []byte) error {
	ctrl, bs, err := c.nofTarget(ctx, r)
	if err != nil {
		return err
	}
	whole := len(dst) / bs * bs
	err = ctrl.ReadAt(ctx, r.Nsid, dst[:whole], int64(r.Offset))
	if err == nil && whole < len(dst) {
		tail := make([]byte, bs)
		if err = ctrl.ReadAt(ctx, r.Nsid, tail, int64(r.Offset)+int64(whole)); err == nil {
			copy(dst[whole:], tail)
		}
	}
	if err != nil {
		c.dropNOF(r, ctrl)
		return kverr.New(kverr.TransferFail, "", "NOF read %s ns %d: %v", r.Nqn, r.Nsid, err)
	}
	return nil
}

// writeNOF writes value to every NOF replica, padding the last block.
func (c *Client) writeNOF(ctx context.Context, rs []*kvtierpb.Replica, value []byte) error {
	var errs error
	for _, r := range rs {
		errs = errors.Join(errs, c.writeNOFOne(ctx, r, value))
	}
	return errs
}

func (c *Client) writeNOFOne(ctx context.Context, r *kvtierpb.Replica, value []byte) error {
	ctrl, bs, err := c.nofTarget(ctx, r)
	if err != nil {
		return err
	}
	whole := len(value) / bs * bs
	err = ctrl.WriteAt(ctx, r.Nsid, value[:whole], int64(r.Offset))
	if err == nil && whole < len(value) {
		tail := make([]byte, bs)
		copy(tail, value[whole:])
		err = ctrl.WriteAt(ctx, r.Nsid, tail, int64(r.Offset)+int64(whole))
	}
	if err != nil {
		c.dropNOF(r, ctrl)
		return kverr.New(kverr.TransferFail, "", "NOF write %s ns %d: %v", r.Nqn, r.Nsid, err)
	}
	return nil
}
