package h2unary

import (
	"bytes"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/internal/ways/h2watch/h2test"
)

// TestGRPCClient: grpc-go's client calls through the server: answers of
// every size, from empty to several times the client's windows (which
// grpc-go opens as it reads), 64 calls at once on one connection, and
// each error answer with grpc-go's codes and words.
func TestGRPCClient(t *testing.T) {
	s, _, addr := startServer(t, Config{}, nil)
	cc := h2test.GRPC(t, addr)
	for _, n := range []int{0, 1, 100, 16 << 10, 70 << 10, 1 << 20} {
		out := new(wrapperspb.BytesValue)
		if err := cc.Invoke(ctx(t), echoMethod, echo(n), out); err != nil || !bytes.Equal(out.Value, bytes.Repeat([]byte("e"), n)) {
			t.Fatalf("echo of %d bytes: %d bytes back, %v", n, len(out.Value), err)
		}
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			out := new(wrapperspb.BytesValue)
			if err := cc.Invoke(ctx(t), echoMethod, wrapperspb.Bytes([]byte(strconv.Itoa(i))), out); err != nil || string(out.Value) != strconv.Itoa(i) {
				t.Errorf("call %d: %q, %v", i, out.Value, err)
			}
		})
	}
	wg.Wait()

	for _, tc := range []struct {
		method string
		in     any
		code   codes.Code
		msg    string
	}{
		{failMethod, &emptypb.Empty{}, codes.FailedPrecondition, failMessage}, // percent-encoded on the wire, decoded by the client
		{"/h2unary.test.Echo/Nothing", &emptypb.Empty{}, codes.Unimplemented, "unknown method Nothing for service h2unary.test.Echo"},
		{"/h2unary.test.Other/Echo", &emptypb.Empty{}, codes.Unimplemented, "unknown service h2unary.test.Other"},
		{echoMethod, rawMessage{0x0a, 5}, codes.Internal, "grpc: error unmarshalling request: "}, // a field cut short
		{echoMethod, echo(DefaultMaxMessageBytes), codes.ResourceExhausted, "grpc: received message larger than max (4194309 vs. 4194304)"},
	} {
		var opts []grpc.CallOption
		if _, ok := tc.in.(rawMessage); ok {
			opts = append(opts, grpc.ForceCodec(rawCodec{}))
		}
		err := cc.Invoke(ctx(t), tc.method, tc.in, new(emptypb.Empty), opts...)
		st := status.Convert(err)
		if st.Code() != tc.code || !bytes.HasPrefix([]byte(st.Message()), []byte(tc.msg)) {
			t.Errorf("%s: %v %q, want %v %q", tc.method, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
	// The connection served all of that, and holds nothing.
	out := new(wrapperspb.BytesValue)
	if err := cc.Invoke(ctx(t), echoMethod, echo(3), out, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "no call in progress", func() bool { return s.InProgress() == 0 })
}

// rawMessage is a request's bytes as they are sent, through rawCodec.
type rawMessage []byte

// rawCodec sends a rawMessage as it is, and reads nothing back.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(rawMessage), nil }
func (rawCodec) Unmarshal([]byte, any) error   { return nil }
func (rawCodec) Name() string                  { return "proto" }
