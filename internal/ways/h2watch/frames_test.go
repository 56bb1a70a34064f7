package h2watch

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"golang.org/x/net/http2"
)

// TestFrameScanner: a stream of frames, the client's preface first, gives
// every frame's header and the values the watchdog reads, whether it
// arrives whole or split at every byte.
func TestFrameScanner(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	must(t, fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 7}))
	must(t, fr.WriteSettingsAck())
	must(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("headers"), EndHeaders: true}))
	must(t, fr.WriteData(1, true, bytes.Repeat([]byte("d"), 300)))
	must(t, fr.WriteWindowUpdate(0, 1000))
	must(t, fr.WriteWindowUpdate(1, 1<<31-1))
	must(t, fr.WritePing(false, [8]byte{1}))
	must(t, fr.WriteRSTStream(3, http2.ErrCodeCancel))
	must(t, fr.WriteGoAway(5, http2.ErrCodeNo, []byte("debug data")))
	must(t, fr.WriteData(7, false, nil))
	want := []string{
		"SETTINGS flags=0x0 stream=0 length=12",
		"SETTINGS value 0005 00100000",
		"SETTINGS value 0004 00000007",
		"SETTINGS flags=0x1 stream=0 length=0",
		"HEADERS flags=0x4 stream=1 length=7",
		"DATA flags=0x1 stream=1 length=300",
		"WINDOW_UPDATE flags=0x0 stream=0 length=4",
		"WINDOW_UPDATE value 000003e8",
		"WINDOW_UPDATE flags=0x0 stream=1 length=4",
		"WINDOW_UPDATE value 7fffffff",
		"PING flags=0x0 stream=0 length=8",
		"RST_STREAM flags=0x0 stream=3 length=4",
		"GOAWAY flags=0x0 stream=0 length=18",
		"GOAWAY value 00000005",
		"DATA flags=0x0 stream=7 length=0",
	}
	in := b.Bytes()
	for size := 1; size <= len(in); size++ {
		var got []string
		sc := frameScanner{skip: len(http2.ClientPreface)}
		for p := range slices.Chunk(in, size) {
			sc.scan(p, func(f frame, v []byte) {
				if v == nil {
					got = append(got, fmt.Sprintf("%v flags=%#x stream=%d length=%d", f.typ, uint8(f.flags), f.stream, f.length))
				} else if len(v) == 6 {
					got = append(got, fmt.Sprintf("%v value %x %x", f.typ, v[:2], v[2:]))
				} else {
					got = append(got, fmt.Sprintf("%v value %x", f.typ, v))
				}
			})
		}
		if !slices.Equal(got, want) {
			t.Fatalf("in pieces of %d bytes:\n%s\nwant\n%s", size, join(got), join(want))
		}
	}
}

func join(lines []string) string {
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString("\t" + l + "\n")
	}
	return b.String()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
