package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// chunkSize is the largest read forwarded as one unit. Latency is applied
// per chunk, and a bandwidth cap paces chunks.
const chunkSize = 32 << 10

// queueChunks bounds how many chunks one direction of one connection holds
// (latency in flight, or a blackhole): at most queueChunks*chunkSize bytes.
// Past it the proxy stops reading, so the sender's socket buffers fill and
// its writes block, as over a real congested or dead path.
const queueChunks = 64

// Fault is the fault a Proxy applies. The zero value forwards bytes as they
// come. Negative durations and rates count as zero.
type Fault struct {
	// Latency is added to every chunk of bytes in each direction, so a
	// request-reply round trip takes at least 2*Latency longer.
	Latency time.Duration
	// Jitter adds a uniformly random delay in [0, Jitter) to each chunk on
	// top of Latency. Bytes are never reordered: a chunk is never delivered
	// before the one read before it.
	Jitter time.Duration
	// Bandwidth caps each direction at this many bytes per second, shared
	// by all connections of the proxy (one link). Zero means no cap.
	Bandwidth int64
	// Blackhole stops all forwarding while set: connections are accepted
	// and kept open but the peer never answers. New connections are not
	// dialled to the target until it is lifted. Bytes sent meanwhile are
	// held, as TCP would retransmit them, and delivered in order once
	// Blackhole is cleared; a sender that fills the bounded hold blocks.
	Blackhole bool
}

func (f Fault) normalized() Fault {
	f.Latency = max(f.Latency, 0)
	f.Jitter = max(f.Jitter, 0)
	f.Bandwidth = max(f.Bandwidth, 0)
	return f
}

// delay returns the delay of one chunk read now under f.
func (f Fault) delay() time.Duration {
	d := f.Latency
	if f.Jitter > 0 {
		d += rand.N(f.Jitter)
	}
	return d
}

// Proxy forwards TCP connections from Addr to a target, applying a Fault.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	dialer net.Dialer

	up, down link // client→target and target→client bandwidth

	mu      sync.Mutex
	fault   Fault
	changed chan struct{} // closed and replaced by every Set
	conns   map[*pair]struct{}
	closed  bool

	ctx    context.Context // ends at Close or when Start's ctx ends
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Start listens on 127.0.0.1 on a free port and forwards each accepted
// connection to target ("host:port"), with no fault until Set is called.
// The proxy runs until Close is called or ctx is done; either way Close must
// be called to wait for its goroutines. target is dialled per accepted
// connection, so it need not be up when Start is called.
func Start(ctx context.Context, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		target:  target,
		ln:      ln,
		changed: make(chan struct{}),
		conns:   map[*pair]struct{}{},
	}
	p.ctx, p.cancel = context.WithCancel(ctx)
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		<-p.ctx.Done()
		p.shutdown()
	}()
	go func() {
		defer p.wg.Done()
		p.accept()
	}()
	return p, nil
}

// Addr returns the address clients connect to, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set replaces the fault. It applies to bytes read from then on; bytes
// already in flight keep the latency they were given, but a Blackhole or a
// Bandwidth change applies to them too.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = f.normalized()
	close(p.changed)
	p.changed = make(chan struct{})
}

// Fault returns the fault in effect.
func (p *Proxy) Fault() Fault {
	f, _ := p.state()
	return f
}

func (p *Proxy) state() (Fault, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault, p.changed
}

// Conns returns the number of client connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// ResetConnections aborts every open connection with a TCP RST on both
// sides (SO_LINGER 0), dropping bytes in flight, and returns how many it
// reset. The proxy keeps accepting new connections.
func (p *Proxy) ResetConnections() int {
	all := p.open(false)
	for _, c := range all {
		c.abort(true)
	}
	return len(all)
}

// Close stops accepting, closes every open connection (a FIN, not a reset)
// and returns once every goroutine the proxy started has exited, even with
// bytes held by latency or a blackhole. It is idempotent.
func (p *Proxy) Close() error {
	p.shutdown()
	p.wg.Wait()
	return nil
}

func (p *Proxy) shutdown() {
	p.once.Do(func() {
		all := p.open(true)
		p.cancel()
		_ = p.ln.Close()
		for _, c := range all {
			c.abort(false)
		}
	})
}

// open returns the connections open now; with closing, no more are added.
func (p *Proxy) open(closing bool) []*pair {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = p.closed || closing
	all := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	return all
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient accept error (EMFILE): back off briefly.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		c := &pair{client: client.(*net.TCPConn), done: make(chan struct{})}
		c.ctx, c.cancel = context.WithCancel(p.ctx)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

// serve dials the target for c, once no blackhole holds it, and forwards
// both directions until both end or c is aborted.
func (p *Proxy) serve(c *pair) {
	defer func() {
		c.abort(false)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if !p.waitOpen(c.done) {
		return
	}
	server, err := p.dialer.DialContext(c.ctx, "tcp", p.target)
	if err != nil {
		// The target is down: the client sees its connection reset, as
		// it would connecting to a closed port directly.
		c.abort(true)
		return
	}
	if !c.setServer(server.(*net.TCPConn)) {
		return // aborted while dialling; setServer closed server
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, c.client, c.server, &p.up) }()
	go func() { defer wg.Done(); p.pipe(c, c.server, c.client, &p.down) }()
	wg.Wait()
}

// waitOpen waits until no blackhole is set. It returns false if done or the
// proxy closed first.
func (p *Proxy) waitOpen(done <-chan struct{}) bool {
	for {
		f, changed := p.state()
		if !f.Blackhole {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		case <-p.ctx.Done():
			return false
		}
	}
}

// chunk is bytes read from one side, to be written to the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe forwards src to dst: a reader stamps each chunk with its due time and
// queues it; pipe writes it when due, paced by l. At src's EOF it half-closes
// dst; on any error it aborts c, which unblocks the other direction too.
func (p *Proxy) pipe(c *pair, src, dst *net.TCPConn, l *link) {
	q := make(chan chunk, queueChunks)
	readDone := make(chan struct{})
	go func() { // owned by pipe, which waits on readDone
		defer close(readDone)
		defer close(q)
		var last time.Time
		buf := make([]byte, chunkSize)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				f, _ := p.state()
				due := time.Now().Add(f.delay())
				if due.Before(last) {
					due = last // never reorder bytes
				}
				last = due
				select {
				case q <- chunk{b: append([]byte(nil), buf[:n]...), due: due}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() { <-readDone }()

	timer := time.NewTimer(0)
	defer timer.Stop()
	wait := func(until time.Time) bool {
		d := time.Until(until)
		if d <= 0 {
			return true
		}
		timer.Reset(d)
		select {
		case <-timer.C:
			return true
		case <-c.done:
			return false
		}
	}
	for ch := range q {
		if !wait(ch.due) {
			return
		}
		for b := ch.b; len(b) > 0; {
			if !p.waitOpen(c.done) {
				return
			}
			f, _ := p.state()
			n := len(b)
			if f.Bandwidth > 0 {
				n = min(n, max(1, int(f.Bandwidth/100))) // pieces of 10 ms of the cap
			}
			if !wait(l.reserve(n, f.Bandwidth)) {
				return
			}
			if _, err := dst.Write(b[:n]); err != nil {
				c.abort(false)
				return
			}
			b = b[n:]
		}
	}
	select {
	case <-c.done:
	default:
		_ = dst.CloseWrite() // src ended cleanly: pass the FIN on
	}
}

// link paces one direction of the proxy to a bandwidth.
type link struct {
	mu   sync.Mutex
	next time.Time // when the link is free again
}

// reserve books n bytes at bytesPerSec and returns when they may be sent.
// With no cap it returns the zero time (now).
func (l *link) reserve(n int, bytesPerSec int64) time.Time {
	if bytesPerSec <= 0 {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	start := l.next
	if start.Before(now) {
		start = now
	}
	l.next = start.Add(time.Duration(int64(n) * int64(time.Second) / bytesPerSec))
	return start
}

// pair is one proxied connection: the accepted client side and, once
// dialled, the target side.
type pair struct {
	client *net.TCPConn
	done   chan struct{}   // closed by abort
	ctx    context.Context // of the dial; cancelled by abort
	cancel context.CancelFunc

	mu      sync.Mutex
	server  *net.TCPConn
	aborted bool
}

// setServer records the dialled target connection. It returns false, and
// closes server, if c was aborted meanwhile.
func (c *pair) setServer(server *net.TCPConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted {
		_ = server.Close()
		return false
	}
	c.server = server
	return true
}

// abort closes both sides once; with rst they send a TCP RST instead of a
// FIN.
func (c *pair) abort(rst bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted {
		return
	}
	c.aborted = true
	close(c.done)
	c.cancel()
	for _, conn := range []*net.TCPConn{c.client, c.server} {
		if conn == nil {
			continue
		}
		if rst {
			_ = conn.SetLinger(0)
		}
		_ = conn.Close()
	}
}
