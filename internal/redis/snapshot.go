package redis

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// SnapshotInfo is what a snapshot holds: its size and the replication stream's position it was
// taken at (the RDB's repl-id and repl-offset fields).
type SnapshotInfo struct {
	Size              int64
	ReplicationID     string
	ReplicationOffset int64
}

// ErrSnapshot means the node did not produce a whole snapshot: it refused the sync, or the
// connection ended before the end of the RDB.
var ErrSnapshot = errors.New("snapshot failed")

// snapshotIdle is how long the node may send nothing before the snapshot is given up. While it
// forks and writes, a node sends a newline every second.
const snapshotIdle = 30 * time.Second

// Snapshot streams an RDB snapshot of the node at addr to w, over the replication handshake
// that redis-cli --rdb uses: the node forks and sends the RDB as it would to a new replica
// (REPLCONF rdb-only: it does not then stream its writes). The snapshot is never held in
// memory here. A replica serves it as well as a primary does, without the primary forking.
func Snapshot(ctx context.Context, addr string, opts Options, w io.Writer) (SnapshotInfo, error) {
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	dialer := &net.Dialer{Timeout: opts.Timeout}
	var conn net.Conn
	var err error
	if opts.TLS != nil {
		conn, err = (&tls.Dialer{NetDialer: dialer, Config: opts.TLS}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = dialer.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return SnapshotInfo{}, classify(err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	c := &syncConn{conn: conn, r: bufio.NewReaderSize(&idleReader{conn}, 64<<10)}

	if opts.Password != "" {
		args := []string{"AUTH", opts.Password}
		if opts.Username != "" {
			args = []string{"AUTH", opts.Username, opts.Password}
		}
		if err := c.command(opts.Timeout, args...); err != nil {
			return SnapshotInfo{}, classify(err)
		}
	}
	// capa eof: the node may stream the RDB as it writes it (diskless), ended by a marker;
	// rdb-only (Redis 7): it drops the connection after the RDB instead of streaming writes.
	if err := c.command(opts.Timeout, "REPLCONF", "capa", "eof"); err != nil {
		return SnapshotInfo{}, fmt.Errorf("%w: REPLCONF capa eof: %w", ErrSnapshot, classify(err))
	}
	if err := c.command(opts.Timeout, "REPLCONF", "rdb-only", "1"); err != nil && !strings.Contains(err.Error(), "Unrecognized") {
		return SnapshotInfo{}, fmt.Errorf("%w: REPLCONF rdb-only: %w", ErrSnapshot, classify(err))
	}
	if err := c.send(opts.Timeout, "SYNC"); err != nil {
		return SnapshotInfo{}, fmt.Errorf("%w: SYNC: %w", ErrSnapshot, classify(err))
	}
	header, err := c.payloadHeader()
	if err != nil {
		return SnapshotInfo{}, err
	}
	head := &headWriter{limit: 64 << 10}
	out := io.MultiWriter(w, head)
	var size int64
	if mark, ok := strings.CutPrefix(header, "EOF:"); ok {
		size, err = copyUntilMark(out, c.r, []byte(mark))
	} else {
		var n int64
		if n, err = strconv.ParseInt(header, 10, 64); err != nil {
			return SnapshotInfo{}, fmt.Errorf("%w: unexpected payload header $%s", ErrSnapshot, header)
		}
		size, err = io.CopyN(out, c.r, n)
	}
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("%w after %d bytes: %w", ErrSnapshot, size, err)
	}
	info, err := ParseRDBHeader(head.buf.Bytes())
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	info.Size = size
	return info, nil
}

// syncConn speaks just enough of the protocol for the handshake.
type syncConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// idleReader gives every read its own deadline: a snapshot may take long, but the node must
// keep sending.
type idleReader struct{ conn net.Conn }

func (r *idleReader) Read(p []byte) (int, error) {
	_ = r.conn.SetReadDeadline(time.Now().Add(snapshotIdle))
	return r.conn.Read(p)
}

func (c *syncConn) send(timeout time.Duration, args ...string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err := c.conn.Write(b.Bytes())
	return err
}

// command sends a command and reads its one-line reply: nil for +OK, the error for -ERR.
func (c *syncConn) command(timeout time.Duration, args ...string) error {
	if err := c.send(timeout, args...); err != nil {
		return err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimRight(line, "\r\n")
	if msg, ok := strings.CutPrefix(line, "-"); ok {
		return errors.New(msg)
	}
	return nil
}

// payloadHeader reads the reply to SYNC: newlines while the node prepares the RDB, then
// $<length> or $EOF:<40-byte mark>.
func (c *syncConn) payloadHeader() (string, error) {
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("%w: waiting for the RDB: %w", ErrSnapshot, err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "-"):
			return "", fmt.Errorf("%w: SYNC: %s", ErrSnapshot, line[1:])
		case strings.HasPrefix(line, "$"):
			return line[1:], nil
		default:
			return "", fmt.Errorf("%w: unexpected reply to SYNC: %q", ErrSnapshot, line)
		}
	}
}

// copyUntilMark copies r to w until the mark, which ends a diskless RDB and is not part of it.
func copyUntilMark(w io.Writer, r io.Reader, mark []byte) (int64, error) {
	buf := make([]byte, 64<<10+len(mark))
	held := 0 // bytes at the start of buf that may be the beginning of the mark
	var total int64
	for {
		n, err := r.Read(buf[held:])
		held += n
		if held >= len(mark) && bytes.Equal(buf[held-len(mark):held], mark) {
			k, werr := w.Write(buf[:held-len(mark)])
			return total + int64(k), werr
		}
		if flush := held - len(mark); flush > 0 {
			k, werr := w.Write(buf[:flush])
			total += int64(k)
			if werr != nil {
				return total, werr
			}
			held = copy(buf, buf[flush:held])
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return total, err
		}
	}
}

// headWriter keeps the first bytes written to it.
type headWriter struct {
	buf   bytes.Buffer
	limit int
}

func (h *headWriter) Write(p []byte) (int, error) {
	if room := h.limit - h.buf.Len(); room > 0 {
		h.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// ParseRDBHeader reads the auxiliary fields at the start of an RDB file: the replication ID and
// offset the snapshot was taken at.
func ParseRDBHeader(rdb []byte) (SnapshotInfo, error) {
	if len(rdb) < 9 || string(rdb[:5]) != "REDIS" {
		return SnapshotInfo{}, errors.New("not an RDB file: it does not start with REDIS")
	}
	r := &rdbReader{b: rdb[9:]}
	info := SnapshotInfo{ReplicationOffset: -1}
	for r.more() && r.b[0] == 0xFA { // RDB_OPCODE_AUX
		r.b = r.b[1:]
		key, err := r.str()
		if err != nil {
			return info, err
		}
		value, err := r.str()
		if err != nil {
			return info, err
		}
		switch key {
		case "repl-id":
			info.ReplicationID = value
		case "repl-offset":
			if info.ReplicationOffset, err = strconv.ParseInt(value, 10, 64); err != nil {
				return info, fmt.Errorf("RDB repl-offset %q: %w", value, err)
			}
		}
	}
	return info, nil
}

type rdbReader struct{ b []byte }

var errShortRDB = errors.New("RDB header cut short")

func (r *rdbReader) more() bool { return len(r.b) > 0 }

func (r *rdbReader) take(n int) ([]byte, error) {
	if n < 0 || len(r.b) < n {
		return nil, errShortRDB
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out, nil
}

// length reads an RDB length; encoded is set (with the encoding in n) for a special string.
func (r *rdbReader) length() (n uint64, encoded bool, err error) {
	b, err := r.take(1)
	if err != nil {
		return 0, false, err
	}
	switch b[0] >> 6 {
	case 0:
		return uint64(b[0] & 0x3F), false, nil
	case 1:
		next, err := r.take(1)
		return uint64(b[0]&0x3F)<<8 | uint64(next[0]), false, err
	case 2:
		switch b[0] {
		case 0x80:
			v, err := r.take(4)
			if err != nil {
				return 0, false, err
			}
			return uint64(binary.BigEndian.Uint32(v)), false, nil
		case 0x81:
			v, err := r.take(8)
			if err != nil {
				return 0, false, err
			}
			return binary.BigEndian.Uint64(v), false, nil
		}
		return 0, false, fmt.Errorf("RDB length byte %#x", b[0])
	default:
		return uint64(b[0] & 0x3F), true, nil
	}
}

// str reads an RDB string: raw, an integer, or LZF-compressed.
func (r *rdbReader) str() (string, error) {
	n, encoded, err := r.length()
	if err != nil {
		return "", err
	}
	if !encoded {
		b, err := r.take(int(n))
		return string(b), err
	}
	switch n {
	case 0:
		b, err := r.take(1)
		if err != nil {
			return "", err
		}
		return strconv.Itoa(int(int8(b[0]))), nil
	case 1:
		b, err := r.take(2)
		if err != nil {
			return "", err
		}
		return strconv.Itoa(int(int16(binary.LittleEndian.Uint16(b)))), nil
	case 2:
		b, err := r.take(4)
		if err != nil {
			return "", err
		}
		return strconv.Itoa(int(int32(binary.LittleEndian.Uint32(b)))), nil
	case 3:
		clen, _, err := r.length()
		if err != nil {
			return "", err
		}
		ulen, _, err := r.length()
		if err != nil {
			return "", err
		}
		in, err := r.take(int(clen))
		if err != nil {
			return "", err
		}
		out, err := lzfDecompress(in, int(ulen))
		return string(out), err
	}
	return "", fmt.Errorf("RDB string encoding %d", n)
}

// lzfDecompress is liblzf's decompressor, which Redis uses for long strings.
func lzfDecompress(in []byte, outLen int) ([]byte, error) {
	out := make([]byte, 0, outLen)
	for i := 0; i < len(in); {
		ctrl := int(in[i])
		i++
		if ctrl < 32 { // a run of ctrl+1 literal bytes
			n := ctrl + 1
			if i+n > len(in) {
				return nil, errShortRDB
			}
			out = append(out, in[i:i+n]...)
			i += n
			continue
		}
		n := ctrl >> 5 // a back reference
		if n == 7 {
			if i >= len(in) {
				return nil, errShortRDB
			}
			n += int(in[i])
			i++
		}
		if i >= len(in) {
			return nil, errShortRDB
		}
		ref := len(out) - ((ctrl&0x1F)<<8 | int(in[i])) - 1
		i++
		if ref < 0 {
			return nil, errors.New("RDB LZF string refers before its start")
		}
		for k := 0; k < n+2; k++ {
			out = append(out, out[ref+k])
		}
	}
	if len(out) != outLen {
		return nil, errors.New("RDB LZF string has the wrong length")
	}
	return out, nil
}
