package hapeers

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/testkit"
)

func TestHello(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _, _, l := newTestServer(t, Config{Peers: []string{"lb"}})
		for _, tc := range []struct {
			proto, to, from string
			want            string
		}{
			{"HAProxyS 2.1", "dthrottled", "lb", "200"},
			{"HAProxyS 2.0", "dthrottled", "lb", "200"},
			{"HAProxyS 2.9", "dthrottled", "lb", "502"},
			{"HTTP/1.1 2.1", "dthrottled", "lb", "501"},
			{"HAProxyS 2.1", "someone-else", "lb", "503"},
			{"HAProxyS 2.1", "dthrottled", "stranger", "504"},
		} {
			if _, st := dial(t, l, tc.proto, tc.to, tc.from, 1); st != tc.want {
				t.Errorf("hello %q to %q from %q: %q, want %q", tc.proto, tc.to, tc.from, st, tc.want)
			}
		}
		if got := s.Stats().BadHellos; got != 4 {
			t.Errorf("BadHellos = %d, want 4", got)
		}
	})
}

// A hello line that never ends is refused at maxLine, not buffered.
func TestHelloTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, _, l := newTestServer(t, Config{})
		long := make([]byte, 10*maxLine)
		for i := range long {
			long[i] = 'a'
		}
		if _, st := dial(t, l, string(long), "dthrottled", "lb", 1); st != "501" {
			t.Errorf("an endless hello: %q, want 501", st)
		}
	})
}

// HAProxy asks a new peer for a resync and pushes nothing until it is
// answered: dthrottled answers with the flags it holds, then "finished".
func TestResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _, _, l := newTestServer(t, Config{})
		h := connect(t, l, 100)
		h.send(appendControl(nil, ctrlResyncRequest))
		h.await("resync finished", func(m Message) bool { return m.Class == classControl && m.Type == ctrlResyncFinished })
		// A client spent: its flag is part of the next resync.
		h.define(stringTable)
		h.update(1, "spent", 9) // first seen: a burst (5) charged
		h.await("the flag", func(m Message) bool { return m.Type == msgUpdate })
		h2 := connect(t, l, 101)
		h2.send(appendControl(nil, ctrlResyncRequest))
		m := h2.await("the flag", func(m Message) bool { return m.Type == msgUpdate })
		if k, v := flagOfUpdate(t, m); k != "spent" || v == 0 {
			t.Errorf("resync pushed %q = %d, want spent refused", k, v)
		}
		h2.await("resync finished", func(m Message) bool { return m.Class == classControl && m.Type == ctrlResyncFinished })
		if s.Stats().Resyncs != 2 {
			t.Errorf("Resyncs = %d, want 2", s.Stats().Resyncs)
		}
	})
}

// Each entry's increase is charged once: the first sight of an entry at
// most a burst, then the difference; the flag follows the bucket, and
// carries the second a token is back.
func TestUpdatesCharge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, table, clk, l := newTestServer(t, Config{})
		h := connect(t, l, 100)
		h.define(stringTable)
		h.update(1, "alice", 2)
		h.update(2, "alice", 4)
		h.update(3, "bob", 1)
		testkit.WaitFor(t, 5*time.Second, "three updates charged", func() bool { return s.Stats().Hits == 5 })
		if st, _ := table.Peek(clk.Now(), "alice"); st.Tokens != 1 {
			t.Errorf("alice holds %v tokens, want 1 (5 - 4)", st.Tokens)
		}
		// HAProxy acks by table id and update id: dthrottled too.
		m := h.await("an ack", func(m Message) bool { return m.Type == msgAck })
		r := reader{b: m.Data}
		if id, upd := r.varint(), r.u32(); id != stringTable.ID || upd == 0 {
			t.Errorf("ack of table %d update %d, want table %d", id, upd, stringTable.ID)
		}
		h.update(4, "alice", 6) // 2 more: alice is 1 in debt
		m = h.await("alice's flag", func(m Message) bool { return m.Type == msgUpdate || m.Type == msgDefine })
		if m.Type == msgDefine {
			d, err := DecodeDefinition(m.Data)
			if err != nil || d.Name != "/web" || d.KeyType != KeyString || d.KeyLen != 32 || d.Data != 1<<dtGPT0 {
				t.Fatalf("dthrottled's definition %+v, %v: want /web with gpt0 alone", d, err)
			}
			m = h.await("alice's flag", func(m Message) bool { return m.Type == msgUpdate })
		}
		k, v := flagOfUpdate(t, m)
		// -1 tokens at 1/s: a token is back in 2 s.
		if want := uint64(clk.Now().Unix() + 2); k != "alice" || v != want {
			t.Errorf("pushed %q = %d, want alice = %d", k, v, want)
		}
		// Two seconds on, the check rounds see the token back: 0.
		clk.Add(2 * time.Second)
		m = h.await("alice's flag cleared", func(m Message) bool { return m.Type == msgUpdate })
		if k, v := flagOfUpdate(t, m); k != "alice" || v != 0 {
			t.Errorf("pushed %q = %d, want alice = 0", k, v)
		}
		if st := s.Stats(); st.Hits != 7 || st.FirstSeen != 2 || st.Keys != 2 {
			t.Errorf("stats %+v: want 7 hits (alice 6, bob 1), 2 first seen, 2 keys", st)
		}
	})
}

// Hits spent elsewhere (a peer's report, another way in) reach HAProxy
// through the check rounds.
func TestHitsFromElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, table, clk, l := newTestServer(t, Config{})
		h := connect(t, l, 100)
		h.define(stringTable)
		h.update(1, "carol", 1)
		testkit.WaitFor(t, 5*time.Second, "the update", func() bool { return s.Stats().Hits == 1 })
		table.Spend(clk.Now(), "carol", 10) // another node's report
		m := h.await("carol's flag", func(m Message) bool { return m.Type == msgUpdate })
		if k, v := flagOfUpdate(t, m); k != "carol" || v == 0 {
			t.Errorf("pushed %q = %d, want carol refused", k, v)
		}
	})
}

// A connection resumed from the same process sends its counters again:
// nothing is charged twice. A new process (a reload) is charged at most a
// burst for what it learnt from the old one.
func TestReconnectAndReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, table, clk, l := newTestServer(t, Config{})
		h := connect(t, l, 100)
		h.define(stringTable)
		h.update(1, "dave", 3)
		testkit.WaitFor(t, 5*time.Second, "the update", func() bool { return s.Stats().Hits == 3 })
		h.c.Close()
		h = connect(t, l, 100) // the same process again
		h.define(stringTable)
		h.update(1, "dave", 3)
		h.update(2, "dave", 4)
		testkit.WaitFor(t, 5*time.Second, "the updates", func() bool { return s.Stats().Updates == 3 && s.Stats().Hits == 4 })
		if st, _ := table.Peek(clk.Now(), "dave"); st.Tokens != 1 {
			t.Errorf("dave holds %v tokens after a reconnection, want 1 (5 - 4)", st.Tokens)
		}
		// The reloaded process learnt dave = 4 from the old one and served 5
		// more: 9, of which a burst (5) is charged.
		n := connect(t, l, 200)
		n.define(stringTable)
		n.update(1, "dave", 9)
		testkit.WaitFor(t, 5*time.Second, "the new process's update", func() bool { return s.Stats().Hits == 9 })
		if st, _ := table.Peek(clk.Now(), "dave"); st.Tokens != -4 {
			t.Errorf("dave holds %v tokens after a reload, want -4 (1 - a burst of 5)", st.Tokens)
		}
	})
}

// A table not followed, or without the counter or gpt0, is refused,
// counted, and its updates are acked but charge nothing; keys that are
// no tag charge nothing either.
func TestRefusedTablesAndBadKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, table, clk, l := newTestServer(t, Config{})
		h := connect(t, l, 100)
		other := stringTable
		other.ID, other.Name = 8, "/other"
		h.define(other)
		h.update(1, "erin", 3)
		noFlag := stringTable
		noFlag.ID, noFlag.Data = 9, 1<<dtGPC0
		h.define(noFlag)
		h.update(2, "erin", 3)
		h.define(stringTable)
		h.update(3, "", 3)
		h.update(4, "a\nb", 3)
		h.update(5, "ok", 1)
		testkit.WaitFor(t, 5*time.Second, "the last update", func() bool { return s.Stats().Updates == 3 && s.Stats().Hits == 1 })
		st := s.Stats()
		if st.RefusedTables != 2 || st.BadKeys != 2 || st.Hits != 1 {
			t.Errorf("stats %+v: want 2 tables refused, 2 bad keys, 1 hit", st)
		}
		if _, err := table.Peek(clk.Now(), "erin"); err != bucket.ErrUnknownTag {
			t.Errorf("erin was charged from a table not followed")
		}
		// The refused tables' updates are acked all the same.
		h.await("an ack of update 2", func(m Message) bool {
			r := reader{b: m.Data}
			return m.Type == msgAck && r.varint() == 9 && r.u32() == 2
		})
	})
}

// Memory is bounded by MaxKeys whatever HAProxy sends.
func TestMaxKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _, _, l := newTestServer(t, Config{MaxKeys: 3})
		h := connect(t, l, 100)
		h.define(stringTable)
		for i := range 10 {
			h.update(uint32(i+1), "k"+itoa(i), 1)
		}
		testkit.WaitFor(t, 5*time.Second, "ten updates", func() bool { return s.Stats().Keys+int(s.Stats().Untracked) == 10 })
		if st := s.Stats(); st.Keys != 3 || st.Untracked != 7 {
			t.Errorf("stats %+v: want 3 keys, 7 untracked", st)
		}
	})
}

// A malformed message ends the connection, counted.
func TestMalformedEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _, _, l := newTestServer(t, Config{})
		for _, bad := range [][]byte{
			{classReserved, 0},
			append([]byte{classStickTable, msgUpdate}, appendVarint(nil, MaxMessage+1)...),
		} {
			h := connect(t, l, 100)
			h.define(stringTable)
			h.send(bad)
			h.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var b [512]byte
			for {
				if _, err := h.r.Read(b[:]); err != nil {
					break
				}
			}
		}
		testkit.WaitFor(t, 5*time.Second, "two connections ended", func() bool { return s.Stats().BadMessages == 2 })
		// A truncated update of a followed table ends it too.
		h := connect(t, l, 100)
		h.define(stringTable)
		h.send(appendMessage(nil, msgUpdate, []byte{0, 0, 0, 1, 40, 'x'}))
		testkit.WaitFor(t, 5*time.Second, "the third", func() bool { return s.Stats().BadMessages == 3 })
	})
}

// TestHeartbeat, on fake time: dthrottled keeps a quiet connection alive
// (HAProxy ends one silent for 5 s): a connection silent for
// heartbeatEvery is sent a heartbeat then, not a tick before, and one
// more every heartbeatEvery of silence after.
func TestHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, _, l := newTestServer(t, Config{})
		start := time.Now()
		h := connect(t, l, 100)
		for i := range 3 {
			h.await("a heartbeat", func(m Message) bool { return m.Class == classControl && m.Type == ctrlHeartbeat })
			if took, want := time.Since(start), time.Duration(i+1)*heartbeatEvery; took != want {
				t.Errorf("heartbeat %d after %v, want %v", i+1, took, want)
			}
		}
	})
}

// A round checks each entry at most once, however large its budget.
func TestRoundChecksEachOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _, clk, l := newTestServer(t, Config{CheckInterval: time.Hour})
		h := connect(t, l, 100)
		h.define(stringTable)
		h.update(1, "one", 1)
		h.update(2, "two", 1)
		testkit.WaitFor(t, 5*time.Second, "the updates", func() bool { return s.Stats().Keys == 2 })
		if n := s.book.round(clk.Now(), checkBudget, time.Hour); n != 2 {
			t.Errorf("a round over 2 entries checked %d", n)
		}
		if n := s.book.round(clk.Now(), 1, time.Hour); n != 1 {
			t.Errorf("a round of budget 1 checked %d", n)
		}
	})
}
