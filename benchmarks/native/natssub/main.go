// natssub: an independent NATS subscriber (the official Go client) for
// benchmarks/latency_sweep.py. It subscribes to a subject, stamps each message's
// receive time, decodes t_sent from mqbench's 24-byte wire header, and on SIGTERM
// writes "t_sent t_recv" lines (nanoseconds, wall clock) to the output file.
package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: natssub URL SUBJECT OUTFILE")
		os.Exit(2)
	}
	nc, err := nats.Connect(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(1)
	}
	const maxStamps = 20_000_000 // bounded: 320 MB at most
	stamps := make([][2]int64, 0, 1<<20)
	ch := make(chan *nats.Msg, 1<<16)
	sub, err := nc.ChanSubscribe(os.Args[2], ch)
	if err != nil {
		fmt.Fprintln(os.Stderr, "subscribe:", err)
		os.Exit(1)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "flush:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
loop:
	for {
		select {
		case m := <-ch:
			now := time.Now().UnixNano()
			if len(m.Data) >= 24 && len(stamps) < maxStamps {
				sent := int64(binary.LittleEndian.Uint64(m.Data[8:16]))
				stamps = append(stamps, [2]int64{sent, now})
			}
		case <-stop:
			break loop
		}
	}
	nc.Close()
	f, err := os.Create(os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, "create:", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(f)
	for _, s := range stamps {
		fmt.Fprintf(w, "%d %d\n", s[0], s[1])
	}
	w.Flush()
	f.Close()
}
