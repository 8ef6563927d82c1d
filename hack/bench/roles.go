package main

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// subscriber counts the PUBLISH frames it receives and runs the receiver
// side of QoS 1 and 2.
type subscriber struct {
	c     *client
	id    string // client id
	addr  string // the broker's address
	start time.Time
	// onMsg, when set, sees every payload with its arrival time since start.
	onMsg func(arrival time.Duration, payload []byte)

	count    atomic.Int64
	stopping atomic.Bool

	// at, last and err are written by run; last and err are read only
	// after it returns. at is the time since start of run's last read.
	at   time.Duration
	last time.Duration
	err  error
}

// run reads until the connection fails or stop is called.
func (s *subscriber) run() {
	for {
		if s.c.fr.buffered() == 0 && s.c.w.Buffered() > 0 {
			// Acks are batched until the next read may block, so one write
			// answers everything read in one go.
			if err := s.c.w.Flush(); err != nil {
				s.fail(err)
				return
			}
		}
		reads := s.c.fr.reads
		fr, err := s.c.fr.next()
		if s.c.fr.reads != reads {
			// A frame's arrival is the read that completed it: one clock
			// reading a read, not one a message (13% of the generator's
			// CPU in qos1).
			s.at = time.Since(s.start)
		}
		if err == nil {
			err = s.handle(fr)
		}
		if err != nil {
			s.fail(err)
			return
		}
	}
}

func (s *subscriber) handle(fr frame) error {
	switch fr.typ {
	case typePublish:
		p, err := parsePublish(fr)
		if err != nil {
			return err
		}
		// A payload shorter than any flow's is a late probe (awaitInterest).
		if len(p.payload) >= minPayload {
			s.last = s.at
			if s.onMsg != nil {
				s.onMsg(s.last, p.payload)
			}
			s.count.Add(1)
		}
		switch p.qos {
		case 1:
			return s.ack(typePuback, p.id)
		case 2:
			return s.ack(typePubrec, p.id)
		}
		return nil
	case typePubrel:
		id, err := packetID(fr)
		if err != nil {
			return err
		}
		return s.ack(typePubcomp, id)
	}
	return fmt.Errorf("subscriber got unexpected packet type %d", fr.typ)
}

func (s *subscriber) ack(typ byte, id uint16) error {
	_, err := s.c.w.Write(appendAck(s.c.w.AvailableBuffer(), typ, id))
	return err
}

// fail keeps err unless it is how a deliberate stop or the scenario
// deadline ends a read: those show up as loss, not as errors.
func (s *subscriber) fail(err error) {
	if s.stopping.Load() || isStop(err) {
		return
	}
	s.err = err
}

// stop makes run return soon by expiring the socket's deadline.
func (s *subscriber) stop() {
	s.stopping.Store(true)
	_ = s.c.conn.SetDeadline(time.Now())
}

// publisher sends n messages at one QoS, keeping at most window of them
// unacknowledged, then a PINGREQ: its PINGRESP (with every ack) means the
// broker has taken everything.
type publisher struct {
	c      *client
	qos    byte
	n      int
	window int
	frames []publishTemplate // message i uses frames[i%len(frames)]
	start  time.Time
	// interval, when positive, paces message i to leave at start+i*interval
	// and flushes each message on its own.
	interval time.Duration
	// seq, for an unpaced flow, stamps message i with first+i, for a
	// subscriber to tell duplicates, gaps and reordering.
	seq   bool
	first int
	// acks, when set, times the acknowledgements of an unpaced QoS 1/2
	// flow.
	acks *ackTimer
}

var errReaderStopped = errors.New("acknowledgement reader stopped")

// run publishes everything and returns once the broker has acknowledged it.
func (p *publisher) run() error {
	if p.qos > 0 && p.interval == 0 {
		return p.runWindow()
	}
	free := make(chan uint16, p.window)
	for id := 1; id <= p.window; id++ {
		free <- uint16(id)
	}
	rel := make(chan uint16, p.window)
	readerDone := make(chan struct{})
	var rerr error
	go func() {
		defer close(readerDone)
		rerr = p.readAcks(free, rel)
	}()
	werr := p.write(free, rel, readerDone)
	if werr != nil && !errors.Is(werr, errReaderStopped) {
		p.c.conn.Close()
		<-readerDone
		return werr
	}
	<-readerDone
	return rerr
}

// Packet id states in runWindow.
const (
	idFree     = iota
	idSent     // PUBLISH written, its PUBACK or PUBREC awaited
	idReleased // PUBREL written, its PUBCOMP awaited
)

// runWindow runs an unpaced QoS 1 or 2 flow from one goroutine, as a
// pipelined client does: it writes everything the window allows in one
// flush, then handles every answer one read brought. Two goroutines
// handing ids over channels cost the generator a wakeup, and often a write
// of one message, per acknowledgement: with the generator's core the
// bottleneck, that measured the generator more than the broker.
func (p *publisher) runWindow() error {
	state := make([]uint8, p.window+1)
	free := make([]uint16, 0, p.window)
	for id := p.window; id >= 1; id-- {
		free = append(free, uint16(id))
	}
	var rel []uint16
	// unanswered counts the PUBLISHes whose PUBACK or PUBREC is awaited.
	sent, unanswered, done, pinged, pong := 0, 0, 0, false, false
	complete := func(id uint16) {
		p.acks.acked(id)
		state[id] = idFree
		free = append(free, id)
		done++
	}
	for done < p.n || !pong {
		for _, id := range rel {
			if _, err := p.c.w.Write(appendAck(p.c.w.AvailableBuffer(), typePubrel, id)); err != nil {
				return err
			}
		}
		rel = rel[:0]
		for ; sent < p.n && len(free) > 0; sent++ {
			id := free[len(free)-1]
			free = free[:len(free)-1]
			state[id] = idSent
			unanswered++
			if err := p.send(sent, id); err != nil {
				return err
			}
			p.acks.sent(id)
		}
		if sent == p.n && !pinged && (p.qos == 1 || unanswered == 0) {
			if _, err := p.c.w.Write([]byte{typePingreq << 4, 0}); err != nil {
				return err
			}
			pinged = true
		}
		if err := p.c.w.Flush(); err != nil {
			return err
		}
		p.acks.flushed()
		for {
			reads := p.c.fr.reads
			fr, err := p.c.fr.next()
			if err != nil {
				return fmt.Errorf("publisher after %d of %d acks: %w", done, p.n, err)
			}
			if p.c.fr.reads != reads {
				p.acks.read()
			}
			if fr.typ == typePingresp {
				pong = true
			} else {
				id, err := packetID(fr)
				if err != nil {
					return err
				}
				if id == 0 || int(id) > p.window {
					return fmt.Errorf("ack type %d for packet id %d, which was never sent", fr.typ, id)
				}
				switch {
				case p.qos == 1 && fr.typ == typePuback && state[id] == idSent:
					unanswered--
					complete(id)
				case p.qos == 2 && fr.typ == typePubrec && state[id] == idSent:
					unanswered--
					state[id] = idReleased
					rel = append(rel, id)
				case p.qos == 2 && fr.typ == typePubcomp && state[id] == idReleased:
					complete(id)
				default:
					return fmt.Errorf("QoS %d publisher got packet type %d for packet id %d, not expected in its state %d", p.qos, fr.typ, id, state[id])
				}
			}
			if p.c.fr.buffered() == 0 {
				break
			}
		}
	}
	return nil
}

func (p *publisher) write(free, rel <-chan uint16, readerDone <-chan struct{}) error {
	wantRel := 0
	if p.qos == 2 {
		wantRel = p.n
	}
	sent, released := 0, 0
	for sent < p.n || released < wantRel {
		if p.qos == 0 {
			if err := p.send(sent, 0); err != nil {
				return err
			}
			sent++
			continue
		}
		var freeCh <-chan uint16
		if sent < p.n {
			freeCh = free
		}
		var id uint16
		isRel := false
		select {
		case id = <-rel:
			isRel = true
		case id = <-freeCh:
		default:
			// Nothing can be sent without waiting: flush what is batched
			// so the broker can answer it.
			if err := p.c.w.Flush(); err != nil {
				return err
			}
			select {
			case id = <-rel:
				isRel = true
			case id = <-freeCh:
			case <-readerDone:
				return errReaderStopped
			}
		}
		var err error
		if isRel {
			_, err = p.c.w.Write(appendAck(p.c.w.AvailableBuffer(), typePubrel, id))
			released++
		} else {
			err = p.send(sent, id)
			sent++
		}
		if err != nil {
			return err
		}
	}
	if _, err := p.c.w.Write([]byte{typePingreq << 4, 0}); err != nil {
		return err
	}
	return p.c.w.Flush()
}

// send writes message i. A paced message carries the time since start it
// was sent at, for the latency scenario to read; an unpaced one 0:
// reading the clock for every message was 13% of the generator's CPU in
// qos1 (kvm-clock here), and nothing reads those stamps.
func (p *publisher) send(i int, id uint16) error {
	if p.interval > 0 {
		if wait := time.Until(p.start.Add(time.Duration(i) * p.interval)); wait > 0 {
			time.Sleep(wait)
		}
	}
	t := &p.frames[i%len(p.frames)]
	var stamp int64
	switch {
	case p.interval > 0:
		stamp = int64(time.Since(p.start))
	case p.seq:
		stamp = int64(p.first + i)
	}
	if _, err := p.c.w.Write(t.appendFrame(p.c.w.AvailableBuffer(), id, stamp)); err != nil {
		return err
	}
	if p.interval > 0 {
		return p.c.w.Flush()
	}
	return nil
}

// ackTimer times each acknowledgement of a window from the flush that
// sent its PUBLISH to the read that brought the acknowledgement: a clock
// reading a write and one a read, not two a message (see send). Its
// methods do nothing on a nil timer.
type ackTimer struct {
	start     time.Time
	sentAt    []time.Duration // by packet id: the flush that sent it, since start
	unflushed []uint16
	readAt    time.Duration // the last read, since start
	lat       []time.Duration
}

func newAckTimer(start time.Time, window, n int) *ackTimer {
	return &ackTimer{start: start, sentAt: make([]time.Duration, window+1), lat: make([]time.Duration, 0, n)}
}

func (a *ackTimer) sent(id uint16) {
	if a != nil {
		a.unflushed = append(a.unflushed, id)
	}
}

func (a *ackTimer) flushed() {
	if a == nil || len(a.unflushed) == 0 {
		return
	}
	now := time.Since(a.start)
	for _, id := range a.unflushed {
		a.sentAt[id] = now
	}
	a.unflushed = a.unflushed[:0]
}

func (a *ackTimer) read() {
	if a != nil {
		a.readAt = time.Since(a.start)
	}
}

func (a *ackTimer) acked(id uint16) {
	if a != nil {
		a.lat = append(a.lat, a.readAt-a.sentAt[id])
	}
}

// readAcks runs the sender side of the QoS 1/2 flows: it hands PUBREC ids
// to the writer for PUBREL and returns completed ids to the window.
func (p *publisher) readAcks(free, rel chan<- uint16) error {
	acked, target := 0, p.n
	if p.qos == 0 {
		target = 0
	}
	pong := false
	for acked < target || !pong {
		fr, err := p.c.fr.next()
		if err != nil {
			return fmt.Errorf("publisher after %d of %d acks: %w", acked, target, err)
		}
		if fr.typ == typePingresp {
			pong = true
			continue
		}
		id, err := packetID(fr)
		if err != nil {
			return err
		}
		if id == 0 || int(id) > p.window {
			return fmt.Errorf("ack type %d for packet id %d, which was never sent", fr.typ, id)
		}
		var to chan<- uint16
		switch {
		case p.qos == 1 && fr.typ == typePuback, p.qos == 2 && fr.typ == typePubcomp:
			to = free
			acked++
		case p.qos == 2 && fr.typ == typePubrec:
			to = rel
		default:
			return fmt.Errorf("QoS %d publisher got unexpected packet type %d", p.qos, fr.typ)
		}
		select {
		case to <- id:
		default:
			return fmt.Errorf("duplicate ack type %d for packet id %d", fr.typ, id)
		}
	}
	return nil
}
