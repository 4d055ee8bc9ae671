package window

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipelineClient is the part of a go-redis client a Batcher uses.
type pipelineClient interface {
	Pipeline() redis.Pipeliner
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	Ping(ctx context.Context) *redis.StatusCmd
}

// ErrBatcherClosed is returned for commands sent after Close.
var ErrBatcherClosed = errors.New("window: batcher closed")

// BatchOptions configure a Batcher. Zero fields take their defaults.
type BatchOptions struct {
	// Workers is how many pipelines may be in flight at once; default 4.
	Workers int
	// MaxBatch is the most commands in one pipeline; default 128.
	MaxBatch int
	// Timeout bounds a pipeline whose commands have no deadline; default 1s.
	Timeout time.Duration
}

// Batcher coalesces the commands that concurrent requests send through
// Process into Redis pipelines: one write and one read for many requests.
// A worker takes the first waiting command, adds whatever else is already
// waiting (up to MaxBatch) and sends them at once, so a lone request still
// costs exactly one round trip and never waits for a timer, while under load
// round trips per decision fall well below one.
//
// A Batcher sits under Redis as its client: NewRedis(NewBatcher(client, o)).
// Each command keeps its own result and error; no command is retried. A
// command whose context has ended before its pipeline is sent is not sent.
// Pipelined, ScriptLoad and Ping go straight to the client.
//
// A Batcher owns its worker goroutines: Close stops them. It is safe for
// concurrent use.
type Batcher struct {
	client     pipelineClient
	opts       BatchOptions
	queue      chan *batchCall
	mu         sync.RWMutex // guards closed against sends racing Close
	closed     bool
	stop       chan struct{}
	wg         sync.WaitGroup
	roundTrips atomic.Uint64
	calls      sync.Pool
}

type batchCall struct {
	ctx  context.Context
	cmd  redis.Cmder
	done chan struct{}
}

// NewBatcher starts a Batcher over client.
func NewBatcher(client pipelineClient, o BatchOptions) *Batcher {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 128
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	b := &Batcher{
		client: client,
		opts:   o,
		queue:  make(chan *batchCall, o.Workers*o.MaxBatch),
		stop:   make(chan struct{}),
	}
	b.calls.New = func() any { return &batchCall{done: make(chan struct{}, 1)} }
	for range o.Workers {
		b.wg.Add(1)
		go b.work()
	}
	return b
}

// Process queues cmd for the next pipeline and waits for its answer. The
// wait is bounded: a pipeline's deadline is the latest of its commands'.
func (b *Batcher) Process(ctx context.Context, cmd redis.Cmder) error {
	c := b.calls.Get().(*batchCall)
	c.ctx, c.cmd = ctx, cmd
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		b.calls.Put(c)
		cmd.SetErr(ErrBatcherClosed)
		return ErrBatcherClosed
	}
	b.queue <- c
	b.mu.RUnlock()
	<-c.done
	c.ctx, c.cmd = nil, nil
	b.calls.Put(c)
	return cmd.Err()
}

// Pipelined sends fn's commands as one pipeline of their own.
func (b *Batcher) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	b.roundTrips.Add(1)
	return b.client.Pipelined(ctx, fn)
}

// ScriptLoad loads a script directly.
func (b *Batcher) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return b.client.ScriptLoad(ctx, script)
}

// Ping pings directly.
func (b *Batcher) Ping(ctx context.Context) *redis.StatusCmd { return b.client.Ping(ctx) }

// RoundTrips returns how many pipelines (round trips) have been sent.
func (b *Batcher) RoundTrips() uint64 { return b.roundTrips.Load() }

// Close stops the workers after their current pipelines and fails the
// commands still waiting. It does not close the client.
func (b *Batcher) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	b.wg.Wait()
	for {
		select {
		case c := <-b.queue:
			c.cmd.SetErr(ErrBatcherClosed)
			c.done <- struct{}{}
		default:
			return nil
		}
	}
}

func (b *Batcher) work() {
	defer b.wg.Done()
	batch := make([]*batchCall, 0, b.opts.MaxBatch)
	for {
		select {
		case c := <-b.queue:
			batch = append(batch[:0], c)
		case <-b.stop:
			return
		}
	fill:
		for len(batch) < b.opts.MaxBatch {
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		b.flush(batch)
	}
}

func (b *Batcher) flush(batch []*batchCall) {
	pipe := b.client.Pipeline()
	var deadline time.Time
	sent := 0
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err) // never sent: nothing counted
			continue
		}
		dl, ok := c.ctx.Deadline()
		if !ok {
			dl = time.Now().Add(b.opts.Timeout)
		}
		if dl.After(deadline) {
			deadline = dl
		}
		pipe.Process(c.ctx, c.cmd)
		sent++
	}
	if sent > 0 {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		b.roundTrips.Add(1)
		pipe.Exec(ctx) // each command carries its own error
		cancel()
	}
	for _, c := range batch {
		c.done <- struct{}{}
	}
}
