package client

import "context"

// GetIntoFunc reads key's value into the buffer alloc returns for the
// object's size, and returns that size. Front ends that pool buffers use it
// (package resp): the size is known only once the master answered, and a
// second call to learn it first would double the Get's round trips. alloc
// may be called more than once (a retried read); an error from alloc fails
// the Get with that error.
func (c *Client) GetIntoFunc(ctx context.Context, key string, alloc func(size uint64) ([]byte, error)) (int, error) {
	return c.get(ctx, key, alloc)
}
