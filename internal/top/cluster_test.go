package top_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/top"
	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// exchange sends every board's report to every other over the wire
// format, one datagram of maxPacket bytes each, and returns the largest
// datagram and whether any report left a list out.
func exchange(t *testing.T, boards []*top.Board, now time.Time, maxPacket int) (largest int, partial bool) {
	t.Helper()
	for i, from := range boards {
		e := &wire.Encoder{Node: uint64(i + 1), MaxPacket: maxPacket, Key: []byte("secret")}
		r := from.Report(now)
		_, err := e.EncodeTop(now, r, func(pkt []byte) error {
			largest = max(largest, len(pkt))
			m, err := wire.Decode(pkt, []byte("secret"))
			if err != nil {
				return err
			}
			for j, to := range boards {
				if j != i {
					to.AddPeer(m.Node, now, *m.Top)
				}
			}
			partial = partial || len(m.Top.Lists) < len(r.Lists)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return largest, partial
}

// TestClusterOverTheWire: nodes refuse and serve tags of many policies
// with long keys; their reports, squeezed into one small datagram each,
// cut lists short and leave lists out; every node's cluster view still
// holds every count within its stated error and every tag left out under
// its stated bound, and no datagram is over its size.
func TestClusterOverTheWire(t *testing.T) {
	const nodes, policies = 4, 30
	for _, maxPacket := range []int{wire.MinPacket, 1400} {
		for _, keyLen := range []int{13, 120} {
			name := fmt.Sprintf("%d bytes, keys of %d", maxPacket, keyLen)
			r := rand.New(rand.NewPCG(uint64(maxPacket), uint64(keyLen)))
			boards := make([]*top.Board, nodes)
			for i := range boards {
				b, err := top.New(top.DefaultConfig())
				if err != nil {
					t.Fatal(err)
				}
				boards[i] = b
			}
			// truth[by][policy][tag]
			truth := [2]map[string]map[string]uint64{{}, {}}
			now := t0
			for s := range 10 {
				now = t0.Add(time.Duration(s) * time.Second)
				for _, b := range boards {
					var refs []bucket.Refusals
					var hits []bucket.Hit
					for p := range policies {
						policy := fmt.Sprint("policy-", p)
						sk := topk.New(8) // a shard's small sketch: lists with errors and floors
						for range 20 + 5*p {
							key := fmt.Sprintf("%s-%0*d", policy, keyLen, int(r.ExpFloat64()*float64(5+p)))
							sk.Add([]byte(key), 1)
							add(truth[top.Refused], policy, key, 1)
						}
						refs = append(refs, bucket.Refusals{Policy: policy, Summary: sk.Summary(8)})
						for range 30 {
							key := fmt.Sprintf("%s-%0*d", policy, keyLen, int(r.ExpFloat64()*20))
							n := uint32(1 + r.IntN(3))
							hits = append(hits, bucket.Hit{Key: key, Count: n})
							add(truth[top.Served], policy, key, uint64(n))
						}
					}
					b.AddRefused(now, refs)
					b.AddServed(now, hits, func(key string) string { return key[:strings.LastIndexByte(key, '-')] })
				}
			}
			largest, partial := exchange(t, boards, now, maxPacket)
			if largest > maxPacket {
				t.Fatalf("%s: a datagram of %d bytes", name, largest)
			}
			t.Logf("%s: datagrams of up to %d bytes, lists left out: %v", name, largest, partial)
			for _, by := range []top.By{top.Refused, top.Served} {
				for i, b := range boards {
					v := b.View(by.String(), "cluster", "", 20, now)
					if v.Nodes != nodes {
						t.Fatalf("%s: node %d counts %d nodes", name, i, v.Nodes)
					}
					for policy, want := range truth[by] {
						checkView(t, v, policy, want, partial)
					}
				}
			}
		}
	}
}

func add(m map[string]map[string]uint64, policy, key string, n uint64) {
	if m[policy] == nil {
		m[policy] = map[string]uint64{}
	}
	m[policy][key] += n
}
