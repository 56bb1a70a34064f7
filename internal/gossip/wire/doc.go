// Package wire owns the datagrams that peers exchange, byte by byte: the
// header every datagram carries, the message types (append-only) and their
// bodies, the MAC, and the Encoder and Decode that write and read them.
// docs/wire-format.md documents the format with the test vectors of
// testdata/, which the tests of this package check both ways.
//
// It does not import package gossip, which decides what to send, to whom,
// and what to make of what it receives.
package wire
