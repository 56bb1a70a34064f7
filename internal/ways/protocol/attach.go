package protocol

import (
	"net"
	"os"
	"syscall"
)

// Attaching: a process that may connect to the Unix socket may also
// decide in its own address space from the daemon's shared table
// (docs/shared-table.md). It asks by sending an empty line that carries a
// descriptor as SCM_RIGHTS ancillary data, as the first bytes of a
// connection; the answer is the usual OK for an empty tag, carrying the
// table's two files. No tag is ever sent with ancillary data, so every
// tag keeps its meaning, and a client that sends none is served as
// before at the cost of one recvmsg on its first read.

// Offer returns the files a connection that attaches receives, or nils
// when the table is not shared now.
type Offer func() (table, state *os.File)

// oobSize has room for the few descriptors a client could send.
const oobSize = 64

// firstRead reads a Unix connection's first bytes into c.buf and, when
// they are an attach request, answers it with offer's files. It reports
// false if the connection is done (an error, or end of input, already
// dealt with).
func (c *conn) firstRead(uc *net.UnixConn, offer Offer) bool {
	var oob [oobSize]byte
	n, oobn, _, _, err := uc.ReadMsgUnix(c.buf[c.w:], oob[:])
	attach := oobn > 0 && closeRights(oob[:oobn])
	c.w += n
	if attach && n > 0 && c.buf[c.r] == '\n' {
		c.r++
		c.queries.Add(1)
		var rights []byte
		if tf, sf := offer(); tf != nil && sf != nil {
			rights = syscall.UnixRights(int(tf.Fd()), int(sf.Fd()))
		}
		if _, _, werr := uc.WriteMsgUnix([]byte("OK\n"), rights, nil); werr != nil {
			return false
		}
		if c.r == c.w {
			c.r, c.w = 0, 0
		}
	}
	if n > 0 && c.w > c.r && !c.answer(c.now()) {
		return false
	}
	if err != nil {
		c.readFailed(err)
		return false
	}
	return true
}

// closeRights closes every descriptor an ancillary message carried, and
// reports whether there was one.
func closeRights(oob []byte) bool {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	any := false
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			syscall.Close(fd)
			any = true
		}
	}
	return any
}
