package qemu

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
)

// Event is one QMP event, stamped by QEMU with its host clock.
type Event struct {
	Name string
	Data map[string]any
	At   time.Time
	Seq  uint64 // 1, 2, ... in arrival order
}

// keptEvents bounds the events a VM keeps for waiters.
const keptEvents = 4096

// ErrGone reports a QEMU whose monitor connection has ended.
var ErrGone = errors.New("qemu: the monitor connection ended (QEMU exited?)")

// events keeps a VM's QMP events for waiters. go-qemu's event channel is
// unbuffered and command replies wait behind it, so one goroutine drains it
// into here for the VM's whole life.
type events struct {
	mu      sync.Mutex
	kept    []Event
	seq     uint64
	changed chan struct{}
	closed  bool
}

func newEvents() *events { return &events{changed: make(chan struct{})} }

// pump drains ch until it closes.
func (l *events) pump(ch <-chan qmp.Event) {
	for e := range ch {
		at := time.Unix(e.Timestamp.Seconds, e.Timestamp.Microseconds*1000)
		l.mu.Lock()
		l.seq++
		l.kept = append(l.kept, Event{Name: e.Event, Data: e.Data, At: at, Seq: l.seq})
		if len(l.kept) > keptEvents {
			l.kept = l.kept[len(l.kept)-keptEvents:]
		}
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
	}
	l.mu.Lock()
	l.closed = true
	close(l.changed)
	l.mu.Unlock()
}

// mark is the sequence number of the latest event: wait(mark(), ...) sees
// only later ones.
func (l *events) mark() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// wait returns the first event after since that match accepts.
func (l *events) wait(ctx context.Context, since uint64, match func(Event) bool) (Event, error) {
	for {
		l.mu.Lock()
		for _, e := range l.kept {
			if e.Seq > since && match(e) {
				l.mu.Unlock()
				return e, nil
			}
		}
		ch, closed := l.changed, l.closed
		l.mu.Unlock()
		if closed {
			return Event{}, ErrGone
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// waitEvent is events.wait for the VM: a wait that ends because QEMU did
// says how it ended.
func (vm *VM) waitEvent(ctx context.Context, since uint64, match func(Event) bool) (Event, error) {
	e, err := vm.events.wait(ctx, since, match)
	if errors.Is(err, ErrGone) {
		err = vm.ended(err, exitGrace)
	}
	return e, err
}
