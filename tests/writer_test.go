package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// The test binary re-executes itself as a stalled writer: it calls PutStart
// and then waits to be killed, like an inference process that died mid-put.
func init() {
	if os.Getenv("KVTIER_TEST_WRITER") != "1" {
		return
	}
	size, _ := strconv.ParseUint(os.Getenv("KVTIER_WRITER_SIZE"), 10, 64)
	conn, err := grpc.NewClient(os.Getenv("KVTIER_WRITER_MASTER"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println("writer error", err)
		os.Exit(3)
	}
	m := kvtierpb.NewMasterClient(conn)
	_, err = m.PutStart(context.Background(), &kvtierpb.PutStartRequest{ClientId: "stalled-writer", Key: []byte(os.Getenv("KVTIER_WRITER_KEY")), Size: size})
	if err != nil {
		fmt.Println("writer error", err)
		os.Exit(3)
	}
	fmt.Println("listening putstart=done")
	time.Sleep(time.Hour)
	os.Exit(0)
}

type writerProc struct{ cmd *exec.Cmd }

func (w *writerProc) kill() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() }

func startWriter(t *testing.T, master, key string, size int) *writerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KVTIER_TEST_WRITER=1", "KVTIER_WRITER_MASTER="+master,
		"KVTIER_WRITER_KEY="+key, "KVTIER_WRITER_SIZE="+strconv.Itoa(size))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, _ := out.Read(buf)
	if string(buf[:n]) != "listening putstart=done\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("stalled writer: %q", buf[:n])
	}
	return &writerProc{cmd: cmd}
}
