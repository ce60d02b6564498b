package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/internal/fastrpc"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// masterAddr stands for the address of a running store. In a program it is
// the gRPC address `kvtier standalone` (or `kvtier master`) logs at start,
// e.g. "10.0.0.5:50051"; here the examples start a real master and a real
// appliance (32 MiB of DRAM) in this process once, on a free port.
func masterAddr() string {
	storeOnce.Do(func() { storeAddr, storeErr = startStore() })
	if storeErr != nil {
		panic(storeErr)
	}
	return storeAddr
}

var (
	storeOnce sync.Once
	storeAddr string
	storeErr  error
)

// startStore runs a master (gRPC plus its fast path on one listener, as
// `kvtier master` serves it) and an appliance that mounts its DRAM there.
// They live until the test binary exits.
func startStore() (string, error) {
	m, err := master.New(master.Config{})
	if err != nil {
		return "", err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	ms := master.NewGRPCServer(m)
	s := grpc.NewServer()
	kvtierpb.RegisterMasterServer(s, ms)
	fast := fastrpc.NewServer(&kvtierpb.Master_ServiceDesc, ms, nil)
	glis := fast.Split(lis)
	go func() { _ = s.Serve(glis) }()
	go m.Run(context.Background())
	_, err = appliance.Start(context.Background(), appliance.Config{
		Name: "example-box", MasterAddr: lis.Addr().String(), DRAM: 32 << 20,
		Hugepages: dram.HugepageOff, HeartbeatInterval: 100 * time.Millisecond,
	})
	if err != nil {
		return "", err
	}
	return lis.Addr().String(), nil
}

// connect is what every example starts with: a pure caller (no segment of
// its own) attached to the store's master.
func connect(ctx context.Context) *client.Client {
	c, err := client.New(ctx, client.Config{MasterAddr: masterAddr()})
	if err != nil {
		panic(err)
	}
	return c
}

func ExampleClient_Put() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	// Keys are content-derived, values immutable: a second put of the same
	// key and size is success ("first writer wins"), not an error.
	err := c.Put(ctx, "example/put/block-0001", []byte("kv-cache bytes"))
	fmt.Println("put:", err)
	res, err := c.PutWithResult(ctx, "example/put/block-0001", []byte("kv-cache bytes"))
	fmt.Println("again:", err, "already stored:", res.AlreadyStored)

	// The store being full is its own code: back off and retry later.
	if kverr.Is(err, kverr.NoAvailableHandle) {
		fmt.Println("store full")
	}
	// Output:
	// put: <nil>
	// again: <nil> already stored: true
}

func ExampleClient_Get() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	if err := c.Put(ctx, "example/get/block-0001", []byte("hello, kvtier")); err != nil {
		panic(err)
	}
	v, err := c.Get(ctx, "example/get/block-0001")
	fmt.Printf("%s %v\n", v, err)

	// A missing key is kverr.ObjectNotFound, matched through any wrapping.
	_, err = c.Get(ctx, "example/get/never-stored")
	fmt.Println(kverr.Is(err, kverr.ObjectNotFound), errors.Is(err, kverr.ObjectNotFound.Err()))
	var e *kverr.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code, e.Key)
	}
	// Output:
	// hello, kvtier <nil>
	// true true
	// OBJECT_NOT_FOUND example/get/never-stored
}

func ExampleClient_GetInto() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	block := make([]byte, 4096)
	for i := range block {
		block[i] = byte(i)
	}
	if err := c.Put(ctx, "example/getinto/block-0001", block); err != nil {
		panic(err)
	}
	// GetInto reads into the caller's buffer (no allocation): the buffer
	// must hold the whole object.
	buf := make([]byte, 8192)
	n, err := c.GetInto(ctx, "example/getinto/block-0001", buf)
	fmt.Println(n, err, buf[255], buf[4095])

	_, err = c.GetInto(ctx, "example/getinto/block-0001", make([]byte, 100))
	fmt.Println(kverr.CodeOf(err))
	// Output:
	// 4096 <nil> 255 255
	// INVALID_PARAMS
}

func ExampleClient_BatchPut() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	keys := []string{"example/batch/put-0", "example/batch/put-1", "example/batch/put-2"}
	values := [][]byte{[]byte("zero"), []byte("one"), []byte("two")}
	// One master round trip for all keys, one result per key: a batch may
	// partly succeed.
	errs := c.BatchPut(ctx, keys, values, client.WithReplicas(1))
	fmt.Println(errs)
	// Output:
	// [<nil> <nil> <nil>]
}

func ExampleClient_BatchGet() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	keys := []string{"example/batch/get-0", "example/batch/get-1"}
	for i, errp := range c.BatchPut(ctx, keys, [][]byte{[]byte("alpha"), []byte("beta")}) {
		if errp != nil {
			panic(fmt.Sprint(keys[i], errp))
		}
	}
	vals, errs := c.BatchGet(ctx, append(keys, "example/batch/missing"))
	for i := range vals {
		fmt.Printf("%q %v\n", vals[i], kverr.CodeOf(errs[i]))
	}
	// Output:
	// "alpha" OK
	// "beta" OK
	// "" OBJECT_NOT_FOUND
}

func ExampleClient_BatchExist() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	if err := c.Put(ctx, "example/batch/exist-0", []byte("x")); err != nil {
		panic(err)
	}
	// Inference engines probe before they store; an existence probe never
	// extends a lease, so it keeps nothing from eviction.
	exists, err := c.BatchExist(ctx, []string{"example/batch/exist-0", "example/batch/exist-1"})
	fmt.Println(exists, err)
	// Output:
	// [true false] <nil>
}

func ExampleClient_GetWith() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	if err := c.Put(ctx, "example/getwith/block-0001", []byte("sized after the fact")); err != nil {
		panic(err)
	}
	// GetWith asks for a buffer once the object's size is known: the
	// bytes land in memory the caller manages (a pool, C memory), no copy.
	pool := make([]byte, 1<<10)
	n, err := c.GetWith(ctx, "example/getwith/block-0001", func(size uint64) ([]byte, error) {
		return pool[:size], nil
	})
	fmt.Printf("%d %v %s\n", n, err, pool[:n])
	// Output:
	// 20 <nil> sized after the fact
}

func ExampleClient_RemoveByRegex() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	for _, k := range []string{"example/rm/model-a/0", "example/rm/model-a/1", "example/rm/model-b/0"} {
		if err := c.Put(ctx, k, []byte("x")); err != nil {
			panic(err)
		}
	}
	n, err := c.RemoveByRegex(ctx, "^example/rm/model-a/", false)
	fmt.Println(n, err)
	left, _ := c.BatchExist(ctx, []string{"example/rm/model-a/0", "example/rm/model-b/0"})
	fmt.Println(left)
	// Output:
	// 2 <nil>
	// [false true]
}
