package client

import "context"

// LateSum exposes lateSum to the external tests: whether a classic put of
// size bytes sends its checksum with PutEnd.
func LateSum(c *Client, ctx context.Context, size int) bool { return c.lateSum(ctx, size) }

// LateSumMin is lateSumMin.
const LateSumMin = lateSumMin

// ReadReplicas exposes read: key's object from the replicas of rl into dst.
func ReadReplicas(c *Client, ctx context.Context, key string, rl *ReplicaList, dst []byte) error {
	return c.read(ctx, key, rl, dst)
}

// ResultErr exposes resultErr (a per-key result as an error).
var ResultErr = resultErr
