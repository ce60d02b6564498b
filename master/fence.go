package master

import "github.com/kvtier/kvtier/kverr"

// Fence makes the master refuse mutations (NOT_LEADER) from now on: its
// leadership ended (HA), and another master may already be acknowledging
// puts. It cannot be undone; the process restarts as a standby.
func (m *Master) Fence() { m.fenced.Store(true) }

func (m *Master) fenceErr() error {
	if m.fenced.Load() {
		return kverr.New(kverr.NotLeader, "", "this master lost its leadership (epoch %d): ask the new leader", m.cfg.LeaderEpoch)
	}
	return nil
}
