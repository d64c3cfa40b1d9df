package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/org/redis-operator/test/node"
)

// Delays: this machine's kernel has no sch_netem, but it has nfnetlink_queue. A delayed packet is
// sent to a queue (iptables' NFQUEUE target) in its member's namespace; this process reads it
// from a netlink socket opened in that namespace and lets it go (an NF_ACCEPT verdict) once it
// has waited the delay, in the order it came. Only the packet's id crosses to this process, never
// its contents.

// queueNum is the queue every delay of a namespace uses; queues are per namespace.
const queueNum = 7

// Delay holds each packet each member of a sends to each member of b for d before it goes: one
// way, as a slow link delays (a round trip between them takes d longer). Heal ends it; packets
// already held go when their time comes. A namespace has one delay at a time: another, until
// healed, is refused.
func (n *Net) Delay(a, b []Member, d time.Duration) error {
	for _, m := range a {
		q, err := n.queue(m, d)
		if err != nil {
			return err
		}
		for _, o := range b {
			if err := iptables(q.ns, "-A", chain, "-d", o.IP, "-j", "NFQUEUE", "--queue-num", strconv.Itoa(queueNum), "--queue-bypass"); err != nil {
				return fmt.Errorf("delaying %s: %w", m.Name, err)
			}
		}
	}
	return nil
}

// queue is m's namespace's delaying queue, made once, set to delay by d.
func (n *Net) queue(m Member, d time.Duration) (*delayQueue, error) {
	ns, err := n.enter(m)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if q, ok := n.queues[m.Netns]; ok {
		if q.active && time.Duration(q.delay.Load()) != d {
			return nil, fmt.Errorf("%s delays by %s already: one delay per namespace until healed", m.Name, time.Duration(q.delay.Load()))
		}
		q.delay.Store(int64(d))
		q.active = true
		return q, nil
	}
	q, err := openQueue(ns, d)
	if err != nil {
		return nil, fmt.Errorf("opening a packet queue in the namespace of %s: %w", m.Name, err)
	}
	q.active = true
	n.queues[m.Netns] = q
	return q, nil
}

// delayQueue reads a namespace's queued packets and lets each go after delay.
type delayQueue struct {
	ns    *os.File
	delay atomic.Int64 // a time.Duration
	// active: rules queue packets to it (since a Delay, until healed); Net.mu guards it.
	active bool
	sock   *os.File
	held   chan heldPacket
	stop   chan struct{}
	done   sync.WaitGroup
}

type heldPacket struct {
	id  uint32
	due time.Time
}

// Netlink and nfnetlink_queue constants (linux/netfilter/nfnetlink_queue.h).
const (
	nfnlSubsysQueue    = 3
	nfqnlMsgPacket     = 0
	nfqnlMsgVerdict    = 1
	nfqnlMsgConfig     = 2
	nfqaPacketHdr      = 1
	nfqaVerdictHdr     = 2
	nfqaCfgCmd         = 1
	nfqaCfgParams      = 2
	nfqaCfgQueueMaxlen = 3
	nfqnlCfgCmdBind    = 1
	nfqnlCopyMeta      = 1
	nfAccept           = 1
)

// openQueue opens a netlink socket inside ns (a socket stays in the namespace it was made in) and
// binds it to queueNum.
func openQueue(ns *os.File, delay time.Duration) (*delayQueue, error) {
	fd := -1
	err := node.InNamespace(ns, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		return err
	})
	if err != nil {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	q := &delayQueue{ns: ns, sock: os.NewFile(uintptr(fd), "nfqueue"), held: make(chan heldPacket, 1<<16), stop: make(chan struct{})}
	q.delay.Store(int64(delay))
	bind := attr(nfqaCfgCmd, []byte{nfqnlCfgCmdBind, 0, 0, 0})
	params := attr(nfqaCfgParams, append(binary.BigEndian.AppendUint32(nil, 0), nfqnlCopyMeta)) // copy no payload
	maxlen := attr(nfqaCfgQueueMaxlen, binary.BigEndian.AppendUint32(nil, 1<<16))
	for _, body := range [][]byte{bind, append(params, maxlen...)} {
		if err := q.send(nfqnlMsgConfig, unix.NLM_F_ACK, body); err != nil {
			q.sock.Close()
			return nil, err
		}
		if err := q.ack(); err != nil {
			q.sock.Close()
			return nil, fmt.Errorf("binding queue %d: %w", queueNum, err)
		}
	}
	q.done.Add(2)
	go q.read()
	go q.release()
	return q, nil
}

// attr is one netlink attribute, padded to 4 bytes.
func attr(kind uint16, body []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(body)))
	b = binary.NativeEndian.AppendUint16(b, kind)
	b = append(b, body...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// send writes one nfnetlink_queue message to the kernel.
func (q *delayQueue) send(msg uint16, flags uint16, body []byte) error {
	var b []byte
	b = binary.NativeEndian.AppendUint32(b, uint32(unix.NLMSG_HDRLEN+4+len(body)))
	b = binary.NativeEndian.AppendUint16(b, nfnlSubsysQueue<<8|msg)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST|flags)
	b = binary.NativeEndian.AppendUint32(b, 0) // sequence
	b = binary.NativeEndian.AppendUint32(b, 0) // port id: the kernel fills it
	b = append(b, unix.AF_UNSPEC, 0)           // nfgenmsg: family, version
	b = binary.BigEndian.AppendUint16(b, queueNum)
	b = append(b, body...)
	raw, err := q.sock.SyscallConn()
	if err != nil {
		return err
	}
	var sendErr error
	err = raw.Write(func(fd uintptr) bool {
		sendErr = unix.Sendto(int(fd), b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return !errors.Is(sendErr, unix.EAGAIN)
	})
	return errors.Join(err, sendErr)
}

// receive reads the netlink messages of one datagram.
func (q *delayQueue) receive(buf []byte) ([]syscall.NetlinkMessage, error) {
	n, err := q.sock.Read(buf)
	if err != nil {
		return nil, err
	}
	return syscall.ParseNetlinkMessage(buf[:n])
}

// ack reads the kernel's answer to a request sent with NLM_F_ACK.
func (q *delayQueue) ack() error {
	if err := q.sock.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	defer func() { _ = q.sock.SetReadDeadline(time.Time{}) }()
	msgs, err := q.receive(make([]byte, 4096))
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
			if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
				return unix.Errno(-code)
			}
			return nil
		}
	}
	return errors.New("no answer to a netlink request")
}

// read takes each queued packet's id, in order, and hands it to release with its time to go.
func (q *delayQueue) read() {
	defer q.done.Done()
	defer close(q.held)
	buf := make([]byte, 1<<16)
	for {
		msgs, err := q.receive(buf)
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			continue // ENOBUFS: the kernel dropped what it could not hand over
		}
		for _, m := range msgs {
			if m.Header.Type != nfnlSubsysQueue<<8|nfqnlMsgPacket || len(m.Data) < 4 {
				continue
			}
			if id, ok := packetID(m.Data[4:]); ok {
				q.held <- heldPacket{id: id, due: time.Now().Add(time.Duration(q.delay.Load()))}
			}
		}
	}
}

// packetID is the id in a packet message's NFQA_PACKET_HDR attribute.
func packetID(attrs []byte) (uint32, bool) {
	for len(attrs) >= 4 {
		size := int(binary.NativeEndian.Uint16(attrs))
		kind := binary.NativeEndian.Uint16(attrs[2:]) &^ unix.NLA_F_NESTED
		if size < 4 || size > len(attrs) {
			return 0, false
		}
		if kind == nfqaPacketHdr && size >= 8 {
			return binary.BigEndian.Uint32(attrs[4:]), true
		}
		attrs = attrs[min((size+3)&^3, len(attrs)):]
	}
	return 0, false
}

// release lets each packet go when its time comes.
func (q *delayQueue) release() {
	defer q.done.Done()
	for p := range q.held {
		select {
		case <-q.stop:
			continue // closed: the kernel drops what is held
		case <-time.After(time.Until(p.due)):
		}
		verdict := binary.BigEndian.AppendUint32(nil, nfAccept)
		verdict = binary.BigEndian.AppendUint32(verdict, p.id)
		_ = q.send(nfqnlMsgVerdict, 0, attr(nfqaVerdictHdr, verdict))
	}
}

// close stops reading; the kernel drops the packets still held (the rules that queue them are
// gone before: Close removes the chain first).
func (q *delayQueue) close() {
	close(q.stop)
	q.sock.Close()
	q.done.Wait()
}
