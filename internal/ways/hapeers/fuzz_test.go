package hapeers

import (
	"bytes"
	"os"
	"testing"
)

// FuzzDecode feeds any bytes to the decoder as a stream of messages after
// a definition, as a session reads them: it must never panic, never
// read past what it is given, and never take more than MaxMessage.
func FuzzDecode(f *testing.F) {
	golden, err := os.ReadFile("testdata/haproxy-2.6.bin")
	if err != nil {
		f.Fatal(err)
	}
	hello := bytes.Index(golden, []byte(" 1\n")) + 3
	f.Add(golden[hello:]) // the messages after the hello
	f.Add(AppendDefinition(nil, Definition{ID: 1, Name: "t", KeyType: KeyString, KeyLen: 32, Data: 1<<dtGPT0 | 1<<dtGPC0}))
	f.Add([]byte{classStickTable, msgUpdate, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var def *Definition
		for len(b) > 0 {
			m, n, err := Decode(b)
			if err != nil || n == 0 {
				return
			}
			if n > len(b) || len(m.Data) > MaxMessage {
				t.Fatalf("Decode took %d bytes of %d, data %d", n, len(b), len(m.Data))
			}
			b = b[n:]
			switch m.Type {
			case msgDefine:
				if d, err := DecodeDefinition(m.Data); err == nil {
					def = &d
				}
			case msgUpdate, msgIncUpdate, msgUpdateTimed, msgIncUpdateTimed:
				if def == nil {
					continue
				}
				u, err := DecodeUpdate(m.Type, m.Data, def)
				if err == nil && uint64(len(u.Key)) > max(def.KeyLen, 4) {
					t.Fatalf("key of %d bytes in a table of %d", len(u.Key), def.KeyLen)
				}
			}
		}
	})
}
